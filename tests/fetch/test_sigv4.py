"""shoal's SigV4 signature equals botocore's (the AWS SDK's reference implementation) for the requests the
fetcher sends, session token included: moto checks signatures in the S3 tests, but does not accept session
credentials, so that case is checked here against the reference."""

from __future__ import annotations

from datetime import UTC, datetime
from unittest import mock

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from shoal.fetch.sigv4 import Credentials, canonical_path, canonical_query, sign

NOW = datetime(2026, 11, 27, 1, 2, 3, tzinfo=UTC)


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEJr//////////wEaDHs+session/token="])
@pytest.mark.parametrize(
    ("key", "params", "headers"),
    [
        ("models/llama 3/model-00001-of-00002.safetensors", {}, {"Range": "bytes=100-"}),
        ("models/gguf/x.Q4_0.gguf", {}, {"x-amz-checksum-mode": "ENABLED"}),
        ("models", {"list-type": "2", "prefix": "llama 3/ü~", "delimiter": "/", "continuation-token": "a+b=="}, {}),
    ],
    ids=["ranged-get", "head-with-checksum-mode", "list"],
)
def test_the_signature_equals_botocores(
    key: str, params: dict[str, str], headers: dict[str, str], token: str | None
) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    path, query = canonical_path(f"/{key}"), canonical_query(params)
    amz = {k: v for k, v in headers.items() if k.startswith("x-amz-")}
    ours = sign("GET", "127.0.0.1:9000", path, query, amz, Credentials("AKIDEXAMPLE", secret, token), "eu-west-1", NOW)

    # botocore signs every header it is given; the fetcher signs host and the x-amz-* ones (Range goes unsigned)
    url = f"http://127.0.0.1:9000{path}" + (f"?{query}" if query else "")
    reference = AWSRequest("GET", url, headers=amz)
    with mock.patch("botocore.auth.get_current_datetime", return_value=NOW.replace(tzinfo=None)):
        S3SigV4Auth(BotoCredentials("AKIDEXAMPLE", secret, token), "s3", "eu-west-1").add_auth(reference)
    assert ours["authorization"] == reference.headers["Authorization"]
    assert ours.get("x-amz-security-token") == token
