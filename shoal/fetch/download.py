"""One file from a store into ``NAME.part``, resumed where a cut connection left it, then checked.

A part file is kept across attempts and across processes (the cache lock makes its writer the only one): each
attempt asks the store for the bytes from the part's current size on (an HTTP ``Range``), and a store that
answers with the whole file instead restarts it. The hashes are computed while writing (the bytes already in a
resumed part are read back once); a file whose size or hash differs from what the store publishes is deleted,
never renamed into place.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from shoal.fetch.errors import FetchError, Retryable
from shoal.fetch.listing import Hasher, Listing, RemoteFile
from shoal.fetch.progress import Progress, Report

ATTEMPTS = 5  # failures in a row (no byte gained between them) before a file is given up
READ_SIZE = 1 << 20


@dataclass
class Body:
    """A response body: the file's bytes from ``offset`` on (0 when the store ignored the range)."""

    offset: int
    chunks: Iterator[bytes]


class Store(Protocol):
    """A source's store: what it holds at its current revision, and one file's bytes from an offset on."""

    def listing(self) -> Listing: ...

    def open(self, file: RemoteFile, offset: int) -> AbstractContextManager[Body]: ...


class HashMismatch(FetchError):
    pass


class _Hashes:
    def __init__(self, file: RemoteFile) -> None:
        self.file = file
        self.hashers: list[Hasher] = []
        self.upto = -1  # bytes hashed so far; -1: not started

    def start_at(self, part: Path, offset: int) -> None:
        """Hash state for a body starting at ``offset``: continue, or re-read the part's first bytes."""
        if offset == self.upto:
            return
        self.hashers = [d.hasher(self.file.size) for d in self.file.digests]
        self.upto = 0
        if offset and self.hashers:
            with part.open("rb") as handle:
                while self.upto < offset:
                    data = handle.read(min(READ_SIZE, offset - self.upto))
                    self.update(data)
        self.upto = offset

    def update(self, data: bytes) -> None:
        for hasher in self.hashers:
            hasher.update(data)
        self.upto += len(data)

    def check(self, source: str) -> None:
        for digest, hasher in zip(self.file.digests, self.hashers, strict=True):
            got = hasher.hexdigest()
            if not digest.matches(got):
                raise HashMismatch(
                    f"{source}: {self.file.name} does not match the {digest.algorithm} the store publishes "
                    f"(expected {digest.expected}, got {got}); the download was discarded"
                )


def download(
    store: Store,
    file: RemoteFile,
    part: Path,
    progress: Progress,
    source: str,
    report: Report,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Brings ``part`` to ``file``'s full, verified content; raises ``FetchError`` (or ``OSError`` on a full disk)."""
    offset = part.stat().st_size if part.exists() else 0
    if offset > file.size:
        part.unlink()
        offset = 0
    progress.skip(offset)
    hashes = _Hashes(file)
    failures = 0
    while True:
        if offset == file.size and hashes.upto == offset:
            break
        if offset == file.size:  # a part finished by an earlier process: only the hashes are left to compute
            hashes.start_at(part, offset)
            break
        try:
            offset = _attempt(store, file, part, offset, hashes, progress)
        except (Retryable, httpx.TransportError) as exc:
            failures += 1
            if failures >= ATTEMPTS:
                raise FetchError(f"{source}: {file.name}: gave up after {ATTEMPTS} attempts: {exc}") from None
            offset = part.stat().st_size if part.exists() else 0
            report(f"{source}: {file.name}: {type(exc).__name__}: {exc}; resuming at byte {offset}")
            sleep(0.2 * failures)
            continue
        failures = 0
    try:
        hashes.check(source)
    except HashMismatch:
        part.unlink()
        raise


def _attempt(store: Store, file: RemoteFile, part: Path, offset: int, hashes: _Hashes, progress: Progress) -> int:
    """One request: appends what arrives to ``part`` and returns the new size (short of ``file.size`` if cut)."""
    with store.open(file, offset) as body:
        if body.offset != offset:  # the store sent the whole file: start again
            progress.skip(body.offset - offset)
            offset = body.offset
        hashes.start_at(part, offset)
        with part.open("r+b" if part.exists() else "wb") as handle:
            handle.truncate(offset)
            handle.seek(offset)
            for chunk in body.chunks:
                if offset + len(chunk) > file.size:
                    part.unlink()
                    raise FetchError(f"{file.name}: the store sent more than the {file.size} bytes it lists")
                handle.write(chunk)
                hashes.update(chunk)
                offset += len(chunk)
                progress.advance(len(chunk))
            handle.flush()
            os.fsync(handle.fileno())
    if offset < file.size:
        raise Retryable(f"the body ended at byte {offset} of {file.size}")
    return offset
