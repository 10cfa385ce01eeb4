"""A stand-in for the Hugging Face Hub, which cannot be reached from here: a real HTTP server speaking the part of
the Hub's file API that ``huggingface_hub`` (and shoal's fetcher) use.

- ``GET /api/models/{org}/{repo}/revision/{revision}?blobs=true``: ``sha`` (the commit) and ``siblings`` with
  ``rfilename``, ``size``, ``blobId`` (git blob sha1) and, for LFS files (``*.safetensors``, ``*.gguf``),
  ``lfs: {sha256, size, pointerSize}``;
- ``GET /{org}/{repo}/resolve/{revision}/{file}``: a regular file's bytes (``ETag``: its blob id), or for an LFS
  file a 302 to ``/cdn/{sha256}`` with ``X-Linked-Etag`` / ``X-Linked-Size``; both with ``X-Repo-Commit``, and
  ``Range`` answered with 206 and ``Content-Range``;
- a private repo answers 401 without the right ``Authorization: Bearer``, unknown repos, revisions and files
  404 with the Hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``).

What a test needs to provoke: ``cut_once`` (files whose first download is cut mid-body), ``corrupt`` (files
served with one byte changed), ``unavailable`` (API requests answered 503), ``on_download`` (a hook run as a body starts), and ``downloads`` counts the
body-serving GETs per file (``starts``: where each began).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(name: str) -> bool:
    return name.endswith((".safetensors", ".gguf"))


@dataclass
class Repo:
    files: dict[str, dict[str, bytes]]  # commit -> name -> bytes
    refs: dict[str, str]  # branch or tag -> commit
    token: str | None = None  # private: this bearer token is needed


@dataclass
class HubStandIn:
    repos: dict[str, Repo] = field(default_factory=dict)
    cut_once: set[str] = field(default_factory=set)
    corrupt: set[str] = field(default_factory=set)
    unavailable: int = 0  # API requests still to answer 503
    on_download: Callable[[str], None] | None = None
    downloads: Counter[str] = field(default_factory=Counter)
    starts: list[tuple[str, int]] = field(default_factory=list)  # (file, first byte asked for) of each download
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_repo(self, repo: str, files: dict[str, bytes], token: str | None = None, branch: str = "main") -> str:
        """Adds ``files`` as a new commit of ``repo`` on ``branch``; returns the commit."""
        commit = hashlib.sha1(json.dumps(sorted((n, git_blob_id(d)) for n, d in files.items())).encode()).hexdigest()
        entry = self.repos.setdefault(repo, Repo({}, {}, token))
        entry.files[commit] = dict(files)
        entry.refs[branch] = commit
        return commit

    def add_directory(self, repo: str, directory: Path, token: str | None = None) -> str:
        files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}
        return self.add_repo(repo, files, token)

    def blob(self, sha256: str) -> bytes | None:
        for repo in self.repos.values():
            for files in repo.files.values():
                for data in files.values():
                    if hashlib.sha256(data).hexdigest() == sha256:
                        return data
        return None


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None = None) -> None:
        headers = {"Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": code or "Unauthorized"}).encode(), headers)

    def _repo(self, name: str) -> Repo | None:
        """The repo, or ``None`` after answering 401/404 as the Hub does."""
        repo = self.hub.repos.get(name)
        if repo is not None and repo.token is not None and self.headers.get("Authorization") != f"Bearer {repo.token}":
            self._error(401, "RepoNotFound")
            return None
        if repo is None:
            self._error(404 if self.headers.get("Authorization") else 401, "RepoNotFound")
            return None
        return repo

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        with self.hub.lock:
            self.hub.requests.append(f"{self.command} {path}")
        if match := re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path):
            with self.hub.lock:
                unavailable, self.hub.unavailable = self.hub.unavailable > 0, max(0, self.hub.unavailable - 1)
            return self._error(503) if unavailable else self._info(match[1], match[2])
        if match := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            return self._resolve(match[1], match[2], match[3])
        if match := re.fullmatch(r"/cdn/([0-9a-f]{64})/(.+)", path):
            data = self.hub.blob(match[1])
            return self._error(404, "EntryNotFound") if data is None else self._content(match[2], data, {})
        self._error(404)

    def _commit(self, name: str, revision: str) -> tuple[Repo, str] | None:
        """The repo and the commit ``revision`` names (a branch or a commit), or ``None`` once a 404 is sent."""
        repo = self._repo(name)
        if repo is None:
            return None
        commit = repo.refs.get(revision, revision if revision in repo.files else None)
        if commit is None:
            self._error(404, "RevisionNotFound")
            return None
        return repo, commit

    def _info(self, name: str, revision: str) -> None:
        found = self._commit(name, revision)
        if found is None:
            return
        repo, commit = found
        siblings = []
        for filename, data in sorted(repo.files[commit].items()):
            sibling: dict[str, object] = {"rfilename": filename, "size": len(data), "blobId": git_blob_id(data)}
            if is_lfs(filename):
                sha256 = hashlib.sha256(data).hexdigest()
                sibling["lfs"] = {"sha256": sha256, "size": len(data), "pointerSize": 134}
                sibling["blobId"] = git_blob_id(f"oid sha256:{sha256}\nsize {len(data)}\n".encode())
            siblings.append(sibling)
        body = json.dumps({"id": name, "modelId": name, "sha": commit, "siblings": siblings}).encode()
        self._send(200, body, {"Content-Type": "application/json"})

    def _resolve(self, name: str, revision: str, filename: str) -> None:
        found = self._commit(name, revision)
        if found is None:
            return
        repo, commit = found
        data = repo.files[commit].get(filename)
        if data is None:
            return self._error(404, "EntryNotFound")
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(data)}"'}
        if is_lfs(filename):
            sha256 = hashlib.sha256(data).hexdigest()
            headers |= {
                "Location": f"/cdn/{sha256}/{filename}",
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(len(data)),
            }
            return self._send(302, b"", headers)
        self._content(filename, data, headers)

    def _content(self, filename: str, data: bytes, headers: dict[str, str]) -> None:
        if filename in self.hub.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        if match := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", "")):
            start = int(match[1])
            headers = {**headers, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
        if self.command == "GET":
            with self.hub.lock:
                self.hub.downloads[filename] += 1
                self.hub.starts.append((filename, start))
                cut = filename in self.hub.cut_once
                self.hub.cut_once.discard(filename)
            if self.hub.on_download is not None:
                self.hub.on_download(filename)
        else:
            cut = False
        body = data[start:]
        self.send_response(206 if start else 200)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if cut:  # half the body, then the connection drops
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


class _QuietServer(ThreadingHTTPServer):
    """socketserver prints a handler's exception to ``sys.stderr``, which the in-process CLI runs redirect into
    the output a test reads: a client that hangs up mid-body (the fetcher stopping on a full disk) is expected,
    anything else goes to the log, where pytest shows it."""

    def handle_error(self, request: object, client_address: object) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            logging.getLogger(__name__).exception("hub stand-in: a request from %s failed", client_address)


class HubServer:
    """The stand-in on a free loopback port, in a thread; ``url`` is what ``HF_ENDPOINT`` is set to."""

    def __init__(self, hub: HubStandIn) -> None:
        handler = type("Handler", (_Handler,), {"hub": hub})
        self.hub = hub
        self.server = _QuietServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
