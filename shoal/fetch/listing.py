"""What a store says a source holds: a revision id and files, each with the size and hashes to check it against.

The hashes are the ones the store publishes: the Hub's sha256 of an LFS file (``lfs.sha256`` in the file
metadata, the ``X-Linked-Etag`` of its download) and its git blob id for a small file (sha1 of
``blob <size>\\0<content>``); S3's ETag, the MD5 of a single-part object, and ``x-amz-checksum-sha256`` where an
object carries a full-object checksum. A file with none is checked by size alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, Protocol

Algorithm = Literal["sha256", "md5", "git-sha1", "sha256-base64"]


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class Digest:
    algorithm: Algorithm
    expected: str  # hex, or base64 for sha256-base64 (S3's x-amz-checksum-sha256)

    def hasher(self, size: int) -> Hasher:
        if self.algorithm == "git-sha1":
            sha1 = hashlib.sha1(usedforsecurity=False)
            sha1.update(b"blob %d\0" % size)
            return sha1
        if self.algorithm == "md5":
            return hashlib.md5(usedforsecurity=False)
        return hashlib.sha256()

    def matches(self, hexdigest: str) -> bool:
        if self.algorithm == "sha256-base64":
            import base64

            return base64.b64encode(bytes.fromhex(hexdigest)).decode() == self.expected
        return hexdigest == self.expected.lower()


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch: its name in the local model directory, where the store keeps it, what it must be."""

    name: str
    location: str
    size: int
    digests: tuple[Digest, ...] = ()
    version: str = ""  # the store's own tag for this content (S3's ETag): part of the listing's revision


@dataclass(frozen=True)
class Listing:
    """A source at one revision: ``revision`` names it in the cache (a commit, or a digest of S3's ETags)."""

    revision: str
    files: tuple[RemoteFile, ...]

    def named(self, name: str) -> RemoteFile | None:
        return next((f for f in self.files if f.name == name), None)
