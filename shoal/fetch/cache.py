"""The download directory: one entry per source, snapshots per revision, a lock per revision, atomic publishing.

Layout under ``DIR`` (``--download-dir``)::

    <store>/<name>-<hash>/source.json            the source this entry holds (for people)
    <store>/<name>-<hash>/refs/<revision>        the revision id a branch, tag or S3 prefix pointed at when fetched
    <store>/<name>-<hash>/snapshots/<id>/        a complete model (``<id>.tokenizer/``: its tokenizer files only)
    <store>/<name>-<hash>/.staging/<id>[...]/    files being fetched (``NAME.part`` until verified)
    <store>/<name>-<hash>/locks/<id>.lock        held (flock) by the one process fetching ``<id>``

A snapshot appears by renaming its finished staging directory (same filesystem, so atomic): whatever is under
``snapshots/`` is whole and verified, and nothing else is ever served. The staging directory survives a killed
process so the next fetch resumes it; the lock keeps two fetchers (two engines starting on one node) from
writing it at once: the second waits, then finds the snapshot and downloads nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from shoal.fetch.progress import Report
from shoal.fetch.sources import RemoteSource, parse_source

TOKENIZER_SUFFIX = ".tokenizer"


def default_download_dir() -> Path:
    """``$SHOAL_MODEL_CACHE``, else ``~/.cache/shoal/models``."""
    configured = os.environ.get("SHOAL_MODEL_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "shoal" / "models"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", text).strip("-.")[:96]


class CacheEntry:
    """Everything the cache holds for one source (all its revisions)."""

    def __init__(self, root: Path, source: RemoteSource) -> None:
        identity = source.identity
        store, _, rest = identity.partition("://")
        digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
        self.source = source
        self.root = root
        self.dir = root / store / f"{_slug(rest)}-{digest}"

    def snapshot(self, revision: str, tokenizer_only: bool = False) -> Path:
        return self.dir / "snapshots" / (revision + (TOKENIZER_SUFFIX if tokenizer_only else ""))

    def staging(self, revision: str, tokenizer_only: bool = False) -> Path:
        return self.dir / ".staging" / (revision + (TOKENIZER_SUFFIX if tokenizer_only else ""))

    def find(self, revision: str, tokenizer_only: bool) -> Path | None:
        """The snapshot that serves: the full one, or for ``tokenizer_only`` also the tokenizer one."""
        for candidate in (False, True) if tokenizer_only else (False,):
            path = self.snapshot(revision, candidate)
            if path.is_dir():
                return path
        return None

    def read_ref(self) -> str | None:
        try:
            return (self.dir / "refs" / self.source.ref).read_text().strip() or None
        except OSError:
            return None

    def write_ref(self, revision: str) -> None:
        refs = self.dir / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        _write_atomically(refs / self.source.ref, revision + "\n")

    def publish(self, staging: Path, snapshot: Path) -> None:
        """Renames the finished ``staging`` directory to ``snapshot``: all of it appears at once, or none."""
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(self.dir / "source.json", json.dumps({"source": self.source.identity}) + "\n")
        staging.rename(snapshot)
        _fsync_dir(snapshot.parent)

    @contextlib.contextmanager
    def lock(self, revision: str, report: Report) -> Iterator[None]:
        """Held while ``revision`` is fetched; a second process blocks here until the first is done."""
        locks = self.dir / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        path = locks / f"{revision}.lock"
        with path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                report(f"{self.source.identity}: another process is fetching it (lock {path}); waiting")
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def model_path(snapshot: Path, source: RemoteSource) -> Path:
    """The directory, or for a GGUF source the one file in it."""
    if source.is_file:
        return next(snapshot.glob("*.gguf"))
    return snapshot


def cached_path(text: str, download_dir: Path) -> Path | None:
    """The local model a remote source was last fetched to (full model first, else tokenizer files), without
    asking the store; ``None`` when it was never fetched into ``download_dir`` (or ``text`` is not remote)."""
    source = parse_source(text)
    if source is None:
        return None
    entry = CacheEntry(Path(download_dir), source)
    revision = entry.read_ref()
    found = entry.find(revision, tokenizer_only=True) if revision else None
    return model_path(found, source) if found is not None else None
