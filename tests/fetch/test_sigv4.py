"""shoal's SigV4 signature equals botocore's (the AWS SDK's reference implementation) for the requests the
fetcher sends, session token included: moto checks signatures in the S3 tests, but does not accept session
credentials, so that case is checked here against the reference. botocore runs in moto's venv (``make moto``;
its python-dateutil<3 pin keeps it out of shoal's), all cases in one run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fetch_harness import in_moto_venv

from shoal.fetch.sigv4 import Credentials, canonical_path, canonical_query, sign

NOW = datetime(2026, 11, 27, 1, 2, 3, tzinfo=UTC)
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKENS = [None, "FwoGZXIvYXdzEJr//////////wEaDHs+session/token="]
CASES = {
    "ranged-get": ("models/llama 3/model-00001-of-00002.safetensors", {}, {"Range": "bytes=100-"}),
    "head-with-checksum-mode": ("models/gguf/x.Q4_0.gguf", {}, {"x-amz-checksum-mode": "ENABLED"}),
    "list": (
        "models",
        {"list-type": "2", "prefix": "llama 3/ü~", "delimiter": "/", "continuation-token": "a+b=="},
        {},
    ),
}


def _request(key: str, params: dict[str, str], headers: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """The canonical path and query, and the headers the fetcher signs: host (added by both) and the x-amz-*
    ones (Range goes unsigned; botocore signs every header it is given, so it gets only these)."""
    amz = {k: v for k, v in headers.items() if k.startswith("x-amz-")}
    return canonical_path(f"/{key}"), canonical_query(params), amz


@pytest.fixture(scope="module")
def botocores() -> dict[tuple[str, str | None], str]:
    """botocore's Authorization header for every case and token, keyed by both."""
    keys, requests = [], []
    for case, (key, params, headers) in CASES.items():
        path, query, amz = _request(key, params, headers)
        url = f"http://127.0.0.1:9000{path}" + (f"?{query}" if query else "")
        for token in TOKENS:
            keys.append((case, token))
            requests.append(
                {
                    "url": url,
                    "headers": amz,
                    "access_key": "AKIDEXAMPLE",
                    "secret_key": SECRET,
                    "token": token,
                    "region": "eu-west-1",
                    "now": NOW.replace(tzinfo=None).isoformat(),
                }
            )
    return dict(zip(keys, in_moto_venv({"action": "sign", "requests": requests}), strict=True))


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("case", list(CASES))
def test_the_signature_equals_botocores(
    botocores: dict[tuple[str, str | None], str], case: str, token: str | None
) -> None:
    path, query, amz = _request(*CASES[case])
    ours = sign("GET", "127.0.0.1:9000", path, query, amz, Credentials("AKIDEXAMPLE", SECRET, token), "eu-west-1", NOW)
    assert ours["authorization"] == botocores[case, token]
    assert ours.get("x-amz-security-token") == token
