"""The Hugging Face Hub's file API, as ``huggingface_hub`` uses it, over httpx.

``GET /api/models/{repo}/revision/{revision}?blobs=true`` resolves the revision to a commit (``sha``) and lists
its files with their sizes, git blob ids and, for LFS files, sha256; each file is then
``GET /{repo}/resolve/{commit}/{file}`` (the Hub redirects LFS files to its CDN; httpx drops the
``Authorization`` header on a redirect to another host), resumed with ``Range``. The endpoint is ``HF_ENDPOINT``
(default ``https://huggingface.co``), the token ``HF_TOKEN``. The Hub's ``X-Error-Code`` header tells a missing
repo, revision or file apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from shoal.fetch.download import Body
from shoal.fetch.errors import FetchError, Retryable, Unreachable
from shoal.fetch.http_body import body_of, range_headers
from shoal.fetch.listing import Digest, Listing, RemoteFile
from shoal.fetch.sources import HubSource

DEFAULT_ENDPOINT = "https://huggingface.co"


class HubStore:
    def __init__(self, client: httpx.Client, env: Mapping[str, str], source: HubSource) -> None:
        self.client, self.source = client, source
        self.endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        token = env.get("HF_TOKEN")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._has_token = bool(token)

    def listing(self) -> Listing:
        source = self.source
        url = f"{self.endpoint}/api/models/{source.repo}/revision/{quote(source.revision, safe='')}"
        try:
            response = self.client.get(url, params={"blobs": "true"}, headers=self._headers)
        except httpx.TransportError as exc:
            raise Unreachable(f"{source.identity}: the Hub at {self.endpoint} cannot be reached: {exc}") from None
        if response.status_code != 200:
            raise self._error(response, source, None)
        try:
            info = response.json()
            commit = info["sha"]
        except (ValueError, KeyError, TypeError):
            raise FetchError(f"{source.identity}: {url} did not answer as the Hub's API does (no commit sha)") from None
        files = {s["rfilename"]: self._file(source, commit, s) for s in info.get("siblings", [])}
        if source.filename is not None:
            named = files.get(source.filename)
            if named is None:
                ggufs = sorted(name for name in files if name.endswith(".gguf"))
                raise FetchError(
                    f"{source.identity}: no such file {source.filename} in {source.repo}@{source.revision} "
                    f"(its .gguf files: {', '.join(ggufs) or 'none'})"
                )
            return Listing(
                commit, (RemoteFile(source.filename.rsplit("/", 1)[-1], named.location, named.size, named.digests),)
            )
        return Listing(commit, tuple(files.values()))

    def _file(self, source: HubSource, commit: str, sibling: Mapping[str, Any]) -> RemoteFile:
        name = sibling["rfilename"]
        lfs = sibling.get("lfs")
        if lfs:
            digests: tuple[Digest, ...] = (Digest("sha256", lfs["sha256"]),)
        else:
            digests = (Digest("git-sha1", sibling["blobId"]),) if sibling.get("blobId") else ()
        location = f"{self.endpoint}/{source.repo}/resolve/{commit}/{quote(name)}"
        return RemoteFile(name, location, int(sibling.get("size") or (lfs or {}).get("size") or 0), digests)

    @contextlib.contextmanager
    def open(self, file: RemoteFile, offset: int) -> Iterator[Body]:
        headers = {**self._headers, **range_headers(offset)}
        with self.client.stream("GET", file.location, headers=headers, follow_redirects=True) as response:
            if response.status_code in (200, 206) or response.status_code >= 500 or response.status_code == 429:
                yield body_of(response, file.name)
                return
            response.read()
            raise self._error(response, None, file.name)

    def _error(self, response: httpx.Response, source: HubSource | None, filename: str | None) -> FetchError:
        status, code = response.status_code, response.headers.get("X-Error-Code", "")
        what = source.identity if source is not None else filename
        if status >= 500 or status == 429:
            return Retryable(f"{what}: the Hub answered {status}")
        if status == 401:
            token = "HF_TOKEN was not accepted" if self._has_token else "HF_TOKEN is not set"
            return FetchError(
                f"{what}: 401 from the Hub: credentials missing or wrong ({token}); "
                "the Hub also answers 401 for a repo that does not exist"
            )
        if status == 403:
            gated = (
                " (a gated repo: accept its terms on the Hub with the token's account)" if code == "GatedRepo" else ""
            )
            return FetchError(f"{what}: 403 from the Hub: the credentials (HF_TOKEN) have no access{gated}")
        if status == 404:
            if code == "RevisionNotFound" and source is not None:
                return FetchError(f"{what}: 404 from the Hub: no such revision {source.revision!r} in {source.repo}")
            if code == "EntryNotFound":
                return FetchError(f"{what}: 404 from the Hub: no such file")
            if source is not None:
                return FetchError(f"{what}: 404 from the Hub: no such repo {source.repo}")
            return FetchError(f"{what}: 404 from the Hub: no such file")
        return FetchError(f"{what}: the Hub answered {status}")
