"""The API keys file: tenants, their keys and limits, and each model's limits; mistakes in it are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.gateway.auth import ANONYMOUS, ApiKeys, KeyFileError
from shoal.gateway.quota import Limits


def test_keys_map_to_their_tenant_and_limits(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(
        "tenants:\n  acme:\n    api_keys: [sk-a1, sk-a2]\n    tokens_per_minute: 500\n  beta:\n    api_keys: [sk-b]\n"
    )
    keys = ApiKeys.from_file(path)
    assert keys.tenant_for("Bearer sk-a2").name == "acme"
    assert keys.tenant_for("bearer sk-a1").limits == Limits(tokens_per_minute=500)
    assert keys.tenant_for("Bearer sk-b").limits == Limits()
    assert keys.tenant_for("Bearer sk-a") is None
    assert keys.tenant_for("sk-a1") is None
    assert keys.tenant_for(None) is None


ACME = "tenants:\n  acme:\n    api_keys: [sk-a]\n"


def test_the_models_section_gives_each_models_limits(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(f"{ACME}models:\n  sql-lora:\n    requests_per_minute: 5\n    max_concurrent: 2\n  tiny: {{}}\n")
    keys = ApiKeys.from_file(path)
    assert keys.model_limits == {"sql-lora": Limits(requests_per_minute=5, max_concurrent=2), "tiny": Limits()}
    assert ApiKeys().model_limits == {}


def test_without_a_keys_file_everyone_is_the_anonymous_tenant() -> None:
    assert ApiKeys().tenant_for(None).name == ANONYMOUS


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("tenants: []", "tenants"),
        ("tenants:\n  acme: {}\n", "tenants.acme.api_keys"),
        ("tenants:\n  acme:\n    api_keys: [k]\n    max_concurrent: -1\n", "tenants.acme.max_concurrent"),
        ("tenants:\n  acme:\n    api_keys: [k]\n    requests_per_minute: lots\n", "tenants.acme.requests_per_minute"),
        (f"{ACME}models: [sql]", "models must be a mapping"),
        (f"{ACME}models:\n  sql: 5", "models.sql must be a mapping"),
        (f"{ACME}models:\n  sql:\n    rpm: 5", "models.sql.rpm is not a limit"),
        (f"{ACME}models:\n  sql:\n    tokens_per_minute: -3", "models.sql.tokens_per_minute must be a non-negative"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_entry(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(KeyFileError, match=named):
        ApiKeys.from_file(path)
