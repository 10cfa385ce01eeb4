"""``fetch(SOURCE, DIR)``: a remote model into the cache, once, whole and verified; its local path out.

The store lists the source at its revision (a commit for the Hub, a digest of the objects' ETags for S3). If
that revision is already a snapshot in the cache, nothing is downloaded. Otherwise, under the revision's lock,
the files serving needs (:mod:`shoal.fetch.selection`) are fetched into a staging directory, each resumed and
verified (:mod:`shoal.fetch.download`), after checking the disk has room for them, and the staging directory is
renamed into place (:mod:`shoal.fetch.cache`). A store that cannot be reached is no failure when the cache
already holds what the source's revision last pointed at.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from shoal.fetch.cache import CacheEntry, cached_path, default_download_dir, model_path
from shoal.fetch.download import Store, download
from shoal.fetch.errors import FetchError, Retryable, Unreachable
from shoal.fetch.hub import HubStore
from shoal.fetch.listing import Listing, RemoteFile
from shoal.fetch.progress import Progress, Report, human
from shoal.fetch.s3 import S3Store
from shoal.fetch.selection import CONFIG_FILES, INDEX_FILE, TOKENIZER_FILES, metadata_files, weight_files
from shoal.fetch.sources import HubSource, RemoteSource, parse_source

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
LIST_ATTEMPTS = 3


class NoSpace(FetchError):
    def __init__(self, directory: Path, need: int, free: int) -> None:
        super().__init__(f"no space left on {directory}: need {need} bytes ({free} free)")


@dataclass(frozen=True)
class FetchResult:
    """What a fetch gave: the local model path, the bytes downloaded this time, whether it was all cached."""

    source: str
    path: str
    bytes: int
    cached: bool


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fetch(
    text: str,
    download_dir: Path,
    *,
    tokenizer_only: bool = False,
    report: Report = _stderr,
    env: Mapping[str, str] | None = None,
    progress_interval_s: float = 5.0,
) -> FetchResult:
    """Fetches ``text`` (``hf://``, ``s3://``) into ``download_dir``; a local path or alias comes back as it is."""
    source = parse_source(text)
    if source is None:
        return FetchResult(text, text, 0, True)
    root = Path(download_dir).expanduser()
    try:
        return _fetch(
            text, source, root, tokenizer_only, report, os.environ if env is None else env, progress_interval_s
        )
    except OSError as exc:  # the download directory itself unusable: read-only, not a directory
        raise FetchError(f"{text}: cannot write into {root}: {exc.strerror or exc}") from None


def local_path(text: str, download_dir: Path | None, report: Report = _stderr) -> str:
    """An ``hf://`` or ``s3://`` source (a model or a LoRA adapter) fetched into the cache (nothing to do when it is
    there), as a local path; anything else as it is."""
    if parse_source(text) is None:
        return text
    result = fetch(text, download_dir or default_download_dir(), report=report)
    report(f"{text}: {result.path} ({'cached' if result.cached else f'fetched {result.bytes} bytes'})")
    return result.path


def _fetch(
    text: str,
    source: RemoteSource,
    root: Path,
    tokenizer_only: bool,
    report: Report,
    env: Mapping[str, str],
    progress_interval_s: float,
) -> FetchResult:
    entry = CacheEntry(root, source)
    tokenizer_only = tokenizer_only and not source.is_file  # a GGUF's tokenizer is in the file itself
    if isinstance(source, HubSource) and _COMMIT.match(source.revision):
        found = entry.find(source.revision, tokenizer_only)
        if found is not None:
            return FetchResult(text, str(model_path(found, source)), 0, True)
    with httpx.Client(timeout=httpx.Timeout(30.0, connect=10.0)) as client:
        store: Store = HubStore(client, env, source) if isinstance(source, HubSource) else S3Store(client, env, source)
        try:
            listing = _listing(store, report)
        except Unreachable as exc:
            earlier = cached_path(text, root)
            if earlier is None:
                raise
            report(f"{exc}; using the copy fetched earlier: {earlier}")
            return FetchResult(text, str(earlier), 0, True)
        fetched, cached = 0, True
        found = entry.find(listing.revision, tokenizer_only)
        if found is None:
            with entry.lock(listing.revision, report):
                found = entry.find(listing.revision, tokenizer_only)
                if found is None:
                    fetched = _fetch_snapshot(entry, store, listing, tokenizer_only, report, progress_interval_s)
                    found, cached = entry.snapshot(listing.revision, tokenizer_only), False
        entry.write_ref(listing.revision)
    return FetchResult(text, str(model_path(found, source)), fetched, cached)


def _listing(store: Store, report: Report) -> Listing:
    """The store's listing, asked again after a 5xx or 429 (``LIST_ATTEMPTS`` in all)."""
    for attempt in range(1, LIST_ATTEMPTS + 1):
        try:
            return store.listing()
        except Retryable as exc:
            if attempt == LIST_ATTEMPTS:
                raise FetchError(f"{exc} ({LIST_ATTEMPTS} attempts)") from None
            report(f"{exc}; asking again")
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _fetch_snapshot(
    entry: CacheEntry, store: Store, listing: Listing, tokenizer_only: bool, report: Report, interval_s: float
) -> int:
    """Downloads the files serving needs into the staging directory and publishes it; returns bytes fetched."""
    source = entry.source
    staging = entry.staging(listing.revision, tokenizer_only)
    staging.mkdir(parents=True, exist_ok=True)
    label = f"{source.identity}@{listing.revision[:12]}"
    fetched, files = 0, list(listing.files) if source.is_file else []
    try:
        if not source.is_file:
            names = [f.name for f in listing.files]
            wanted = metadata_files(names, source.identity)
            if tokenizer_only:
                wanted = [n for n in wanted if n in (*CONFIG_FILES, *TOKENIZER_FILES)]
            elif INDEX_FILE in wanted:  # the index names the shards: fetched first, on its own
                fetched += _download_all(entry, store, [_named(listing, INDEX_FILE)], staging, label, None, 0)
                wanted += weight_files(names, json.loads((staging / INDEX_FILE).read_text()), source.identity)
            else:
                wanted += weight_files(names, None, source.identity)
            files = [_named(listing, n) for n in wanted]
        fetched += _download_all(entry, store, files, staging, label, report, interval_s)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        shutil.rmtree(staging, ignore_errors=True)
        need = sum(f.size for f in files) or sum(f.size for f in listing.files if f.name == INDEX_FILE)
        raise NoSpace(entry.root, need, shutil.disk_usage(entry.root).free) from None
    entry.publish(staging, entry.snapshot(listing.revision, tokenizer_only))
    return fetched


def _named(listing: Listing, name: str) -> RemoteFile:
    file = listing.named(name)
    assert file is not None, name  # selection only picks listed names
    return file


def _on_disk(staging: Path, file: RemoteFile) -> int:
    """Bytes of ``file`` already here: all of it once verified (renamed from its part), else its part's size."""
    done = staging / file.name
    if done.is_file():
        return file.size
    part = staging / f"{file.name}.part"
    return min(part.stat().st_size, file.size) if part.is_file() else 0


def _download_all(
    entry: CacheEntry,
    store: Store,
    files: list[RemoteFile],
    staging: Path,
    label: str,
    report: Report | None,
    interval_s: float,
) -> int:
    total = sum(f.size for f in files)
    need = total - sum(_on_disk(staging, f) for f in files)
    free = shutil.disk_usage(staging).free
    if need > free:
        raise NoSpace(entry.root, need, free)
    say = report or (lambda line: None)
    if report is not None:
        say(f"{label}: fetching {len(files)} files, {human(total)} into {entry.root}")
    progress = Progress(label, total, say, interval_s)
    for file in files:
        done = staging / file.name
        if done.is_file():
            progress.skip(file.size)
            continue
        part = staging / f"{file.name}.part"
        download(store, file, part, progress, entry.source.identity, say)
        part.rename(done)
    if report is not None:
        say(progress.finish())
    return progress.fetched
