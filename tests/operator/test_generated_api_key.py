"""Auth on by default, on the real apiserver with the chart's RBAC: an InferenceDeployment without an API-key
Secret gets one generated, which the gateway mounts; later reconciles never rotate it; a given Secret is used
instead and none is generated."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from operator_harness import OperatorProcess, apply, eventually, example, get, wait_ready
from support.kube_testbed import ControlPlane

from shoal.gateway.auth import ApiKeys

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


def tenants_file(plane: ControlPlane, namespace: str, name: str) -> str | None:
    secret = get(plane, namespace, "secret", name)
    return base64.b64decode(secret["data"]["api-keys"]).decode() if secret else None


def test_generated_key_is_loaded_by_the_gateway_and_never_rotated(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    assert apply(installed_chart, namespace, example("keyed")).returncode == 0
    wait_ready(installed_chart, namespace, "keyed")
    first = tenants_file(installed_chart, namespace, "keyed-api-keys")
    assert first is not None
    (tmp_path / "api-keys").write_text(first)
    assert ApiKeys.from_file(tmp_path / "api-keys").enabled
    gateway = get(installed_chart, namespace, "deployment", "keyed-gateway")
    assert gateway is not None
    volumes = gateway["spec"]["template"]["spec"]["volumes"]
    assert {"name": "api-keys", "secret": {"secretName": "keyed-api-keys", "defaultMode": 420}} in volumes

    assert apply(installed_chart, namespace, example("keyed", gateway={"replicas": 2})).returncode == 0
    eventually(
        lambda: (
            (get(installed_chart, namespace, "deployment", "keyed-gateway") or {}).get("spec", {}).get("replicas") == 2
        ),
        60,
        "the spec change applied",
    )
    operator.restart()
    wait_ready(installed_chart, namespace, "keyed")
    assert tenants_file(installed_chart, namespace, "keyed-api-keys") == first


def test_a_given_secret_is_used_and_none_generated(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    body = example("given", gateway={"replicas": 1, "apiKeySecret": {"name": "team-keys"}})
    assert apply(installed_chart, namespace, body).returncode == 0
    eventually(lambda: get(installed_chart, namespace, "deployment", "given-gateway"), 60, "the gateway Deployment")
    volumes = get(installed_chart, namespace, "deployment", "given-gateway")["spec"]["template"]["spec"]["volumes"]
    assert [v["secret"]["secretName"] for v in volumes if "secret" in v] == ["team-keys"]
    assert get(installed_chart, namespace, "secret", "given-api-keys") is None
