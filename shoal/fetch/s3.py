"""S3 and S3-compatible stores (MinIO, moto) over httpx with our own SigV4 signing.

Credentials come only from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``; none: unsigned requests, enough for a public bucket), the region from ``AWS_REGION`` /
``AWS_DEFAULT_REGION`` (default ``us-east-1``), the endpoint of an S3-compatible store from
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (path-style URLs; AWS itself gets virtual-hosted ones). No
profile files, no instance metadata: what a pod's Secret gives is what is used. A prefix is listed with
``ListObjectsV2`` (``delimiter=/``: its top level only); hashes: the ETag is the MD5 of a single-part object
(not of a multipart or SSE-KMS one, whose ETag is something else), and ``x-amz-checksum-sha256`` (asked for with
``x-amz-checksum-mode: ENABLED``) is checked where an object carries a full-object one.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath

import httpx

from shoal.fetch.download import Body
from shoal.fetch.errors import FetchError, Retryable, Unreachable
from shoal.fetch.http_body import body_of, range_headers
from shoal.fetch.listing import Digest, Listing, RemoteFile
from shoal.fetch.selection import CONFIG_FILES, INDEX_FILE, TOKENIZER_FILES
from shoal.fetch.sigv4 import Credentials, canonical_path, canonical_query, sign
from shoal.fetch.sources import S3Source

_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")
_CREDENTIAL_CODES = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken")


def _may_serve(name: str) -> bool:
    """A top-level file the fetcher may pick (:mod:`shoal.fetch.selection`): the others need no hashes."""
    return name in (*CONFIG_FILES, *TOKENIZER_FILES, INDEX_FILE) or name.endswith(".safetensors")


def credentials_from_env(env: Mapping[str, str]) -> Credentials | None:
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not key and not secret:
        return None
    if not key or not secret:
        missing = "AWS_SECRET_ACCESS_KEY" if key else "AWS_ACCESS_KEY_ID"
        raise FetchError(f"credentials: {missing} is not set (set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    return Credentials(key, secret, env.get("AWS_SESSION_TOKEN") or None)


def _strip(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _xml(text: bytes) -> ElementTree.Element | None:
    try:
        return ElementTree.fromstring(text)
    except ElementTree.ParseError:
        return None


def _find(element: ElementTree.Element, name: str) -> str | None:
    for child in element:
        if _strip(child.tag) == name:
            return child.text
    return None


class S3Store:
    def __init__(self, client: httpx.Client, env: Mapping[str, str], source: S3Source) -> None:
        self.client, self.source = client, source
        self.credentials = credentials_from_env(env)
        self.region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.endpoint = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "").rstrip("/")

    def _url(self, bucket: str, key: str) -> tuple[str, str, str]:
        """(scheme://host, host, canonical path) for ``key`` in ``bucket``."""
        if self.endpoint:
            url = httpx.URL(self.endpoint)
            host = url.netloc.decode()
            return f"{url.scheme}://{host}", host, canonical_path(f"{url.path.rstrip('/')}/{bucket}/{key}")
        host = f"{bucket}.s3.{self.region}.amazonaws.com"
        return f"https://{host}", host, canonical_path(f"/{key}")

    def _request(
        self,
        method: str,
        bucket: str,
        key: str,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Request:
        base, host, path = self._url(bucket, key)
        query = canonical_query(params or {})
        sent = dict(headers or {})
        if self.credentials is not None:
            amz = {k: v for k, v in sent.items() if k.lower().startswith("x-amz-")}
            others = {k: v for k, v in sent.items() if not k.lower().startswith("x-amz-")}
            sent = {**others, **sign(method, host, path, query, amz, self.credentials, self.region, datetime.now(UTC))}
        return self.client.build_request(method, f"{base}{path}" + (f"?{query}" if query else ""), headers=sent)

    def _send(self, request: httpx.Request, what: str) -> httpx.Response:
        try:
            return self.client.send(request)
        except httpx.TransportError as exc:
            where = self.endpoint or "S3"
            raise Unreachable(f"{what}: {where} cannot be reached: {exc}") from None

    def listing(self) -> Listing:
        source = self.source
        files = (self._head(source),) if source.is_file else tuple(self._list(source))
        lines = "\n".join(f"{f.name} {f.size} {f.location} {f.version}" for f in files)
        return Listing(hashlib.sha256(lines.encode()).hexdigest()[:16], files)

    def _head(self, source: S3Source) -> RemoteFile:
        request = self._request("HEAD", source.bucket, source.key, headers={"x-amz-checksum-mode": "ENABLED"})
        response = self._send(request, source.identity)
        if response.status_code != 200:
            raise self._error(response, source.identity, key=True)
        name = PurePosixPath(source.key).name
        size = int(response.headers["Content-Length"])
        etag = response.headers.get("ETag", "").strip('"')
        return RemoteFile(name, f"{source.bucket}/{source.key}", size, self._digests(response.headers), etag)

    def _list(self, source: S3Source) -> Iterator[RemoteFile]:
        prefix = f"{source.key}/" if source.key else ""
        params = {"list-type": "2", "prefix": prefix, "delimiter": "/"}
        found = False
        while True:
            response = self._send(self._request("GET", source.bucket, "", params), source.identity)
            if response.status_code != 200:
                raise self._error(response, source.identity, key=False)
            root = _xml(response.content)
            if root is None:
                raise FetchError(f"{source.identity}: the store's listing is not XML")
            for item in (e for e in root if _strip(e.tag) == "Contents"):
                key, size, etag = _find(item, "Key") or "", int(_find(item, "Size") or 0), _find(item, "ETag") or ""
                name = key[len(prefix) :]
                if not name:
                    continue
                found = True
                # only a HEAD tells whether the ETag is an MD5 (not under SSE-KMS) and gives the sha256
                digests = self._head_digests(source.bucket, key) if _may_serve(name) else ()
                yield RemoteFile(name, f"{source.bucket}/{key}", size, digests, etag.strip('"'))
            token = _find(root, "NextContinuationToken")
            if _find(root, "IsTruncated") != "true" or not token:
                break
            params = {**params, "continuation-token": token}
        if not found:
            raise FetchError(f"{source.identity}: 404: no such key or prefix (no objects under {prefix or '/'})")

    def _head_digests(self, bucket: str, key: str) -> tuple[Digest, ...]:
        response = self._send(self._request("HEAD", bucket, key, headers={"x-amz-checksum-mode": "ENABLED"}), key)
        return self._digests(response.headers) if response.status_code == 200 else ()

    @staticmethod
    def _digests(headers: httpx.Headers) -> tuple[Digest, ...]:
        digests: list[Digest] = []
        etag = headers.get("ETag", "").strip('"')
        encrypted = "aws:kms" in headers.get("x-amz-server-side-encryption", "") or headers.get(
            "x-amz-server-side-encryption-customer-algorithm"
        )
        if _MD5_ETAG.match(etag) and not encrypted:
            digests.append(Digest("md5", etag))
        sha256 = headers.get("x-amz-checksum-sha256", "")
        if sha256 and "-" not in sha256 and headers.get("x-amz-checksum-type", "FULL_OBJECT") == "FULL_OBJECT":
            digests.append(Digest("sha256-base64", sha256))
        return tuple(digests)

    @contextlib.contextmanager
    def open(self, file: RemoteFile, offset: int) -> Iterator[Body]:
        bucket, key = file.location.split("/", 1)
        request = self._request("GET", bucket, key, headers=range_headers(offset))
        response = self.client.send(request, stream=True)
        try:
            if response.status_code in (200, 206) or response.status_code >= 500:
                yield body_of(response, file.name)
                return
            response.read()
            raise self._error(response, file.name, key=True)
        finally:
            response.close()

    def _error(self, response: httpx.Response, what: str, key: bool) -> FetchError:
        status = response.status_code
        root = _xml(response.content) if response.content else None
        code = (_find(root, "Code") if root is not None else None) or ""
        if status >= 500 or status == 429:
            return Retryable(f"{what}: the store answered {status} {code}".rstrip())
        if status in (401, 403) or code in _CREDENTIAL_CODES:
            given = "AWS_ACCESS_KEY_ID is not set" if self.credentials is None else "the AWS credentials were refused"
            return FetchError(f"{what}: {status} {code or 'Forbidden'}: credentials: {given}")
        if status == 301 or code == "PermanentRedirect":
            region = response.headers.get("x-amz-bucket-region", "another region")
            return FetchError(f"{what}: the bucket is in {region}; set AWS_REGION={region}")
        if status == 404:
            if code == "NoSuchBucket":
                return FetchError(f"{what}: 404 NoSuchBucket: no such bucket")
            if code:
                return FetchError(f"{what}: 404 {code}: no such key")
            return FetchError(
                f"{what}: 404: no such bucket or key" if key else f"{what}: 404: no such bucket or prefix"
            )
        return FetchError(f"{what}: the store answered {status} {code}".rstrip())
