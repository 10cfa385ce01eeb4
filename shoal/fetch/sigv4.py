"""AWS Signature Version 4 for S3 GET and HEAD requests (pure: the time is given).

The canonical request signs ``host`` and every ``x-amz-*`` header sent; the payload of a GET is empty, so its
hash is the empty string's. The URL is built already encoded the way the canonical request spells it (each
path segment and query value percent-encoded once, query keys sorted), so what is signed is what is sent.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str = ""
    session_token: str | None = None

    def __repr__(self) -> str:  # never print a key, even in a traceback's locals
        return "Credentials(***)"


def canonical_query(params: Mapping[str, str]) -> str:
    return "&".join(f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(params.items()))


def canonical_path(path: str) -> str:
    return quote(path, safe="/~")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(
    method: str,
    host: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    credentials: Credentials,
    region: str,
    now: datetime,
    service: str = "s3",
) -> dict[str, str]:
    """The headers to send: ``headers`` plus ``x-amz-date``, ``x-amz-content-sha256``, the session token if
    any, and ``Authorization``. ``path`` and ``query`` are already canonical (see the helpers above)."""
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    signed = {k.lower(): v.strip() for k, v in headers.items()}
    signed.update({"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": EMPTY_SHA256})
    if credentials.session_token:
        signed["x-amz-security-token"] = credentials.session_token
    names = sorted(k for k in signed if k == "host" or k.startswith("x-amz-"))
    canonical = "\n".join(
        [
            method,
            path,
            query,
            "".join(f"{name}:{signed[name]}\n" for name in names),
            ";".join(names),
            EMPTY_SHA256,
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(("AWS4" + credentials.secret_key).encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    signed.pop("host")
    return signed
