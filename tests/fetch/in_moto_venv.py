"""Run by the python of moto's venv (``hack/moto/install.sh``, ``make moto``), never imported by the tests:
shoal's own venv has no boto3 or botocore, whose python-dateutil<3 pin kubernetes refuses. One JSON request on
stdin, its answer as JSON on stdout:

``{"action": "calls", "endpoint": URL, "region": R, "service": S, "credentials": {...}, "calls": [[OP, KWARGS]]}``
    each call made by a boto3 client in order; the answers (less their ResponseMetadata), datetimes as strings. A
    ``{"base64": ...}`` argument is bytes.
``{"action": "sign", "requests": [{"url", "headers", "access_key", "secret_key", "token", "region", "now"}]}``
    botocore's S3 SigV4 ``Authorization`` header for each GET, signed at ``now`` (ISO 8601, UTC, naive).
"""

from __future__ import annotations

import base64
import json
import sys
from datetime import datetime
from typing import Any
from unittest import mock


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"base64"}:
            return base64.b64decode(value["base64"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def calls(request: dict[str, Any]) -> list[Any]:
    import boto3

    client = boto3.client(
        request["service"], endpoint_url=request["endpoint"], region_name=request["region"], **request["credentials"]
    )
    answers = []
    for op, kwargs in request["calls"]:
        answer = getattr(client, op)(**_decode(kwargs))
        answer.pop("ResponseMetadata", None)
        answers.append(answer)
    return answers


def sign(request: dict[str, Any]) -> list[str]:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signatures = []
    for r in request["requests"]:
        reference = AWSRequest("GET", r["url"], headers=r["headers"])
        with mock.patch("botocore.auth.get_current_datetime", return_value=datetime.fromisoformat(r["now"])):
            credentials = Credentials(r["access_key"], r["secret_key"], r["token"])
            S3SigV4Auth(credentials, "s3", r["region"]).add_auth(reference)
        signatures.append(reference.headers["Authorization"])
    return signatures


def main() -> None:
    request = json.load(sys.stdin)
    answer = {"calls": calls, "sign": sign}[request["action"]](request)
    json.dump(answer, sys.stdout, default=str)


if __name__ == "__main__":
    main()
