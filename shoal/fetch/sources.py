"""What a user types after ``--model`` (or in ``spec.model.source``), read as a place to fetch from.

``hf://ORG/REPO[@REVISION]`` is a Hugging Face repo (revision: a branch, tag or commit; default ``main``), and
``hf://ORG/REPO[@REVISION]/FILE.gguf`` one GGUF file of it. ``s3://BUCKET/PREFIX`` is a prefix holding a Hugging
Face directory, ``s3://BUCKET/KEY.gguf`` one GGUF object. Anything without a scheme is a bundled alias or a local
path: :func:`parse_source` returns ``None`` for it and the caller uses it as it is. Any other scheme is refused
with the list of supported ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from shoal.fetch.errors import SourceError

SUPPORTED = (
    "hf://ORG/REPO[@REVISION][/FILE.gguf], s3://BUCKET/PREFIX or s3://BUCKET/KEY.gguf, a local path or a bundled alias"
)
_HF = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w.-]+))?(?:/(?P<file>.+))?$")
_S3 = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<key>.*))?$")
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face repo at a revision, or one ``.gguf`` file of it."""

    repo: str
    revision: str
    filename: str | None = None

    @property
    def identity(self) -> str:
        """The source without its revision: what the cache directory is named after."""
        return f"hf://{self.repo}" + (f"/{self.filename}" if self.filename else "")

    @property
    def ref(self) -> str:
        return self.revision

    @property
    def is_file(self) -> bool:
        return self.filename is not None

    @property
    def served_name(self) -> str:
        return PurePosixPath(self.filename).stem if self.filename else self.repo


@dataclass(frozen=True)
class S3Source:
    """An S3 prefix holding a Hugging Face directory, or one ``.gguf`` object."""

    bucket: str
    key: str

    @property
    def identity(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def ref(self) -> str:
        return "latest"  # S3 has no revisions: the listing's ETags name what was fetched

    @property
    def is_file(self) -> bool:
        return self.key.endswith(".gguf")

    @property
    def served_name(self) -> str:
        name = PurePosixPath(self.key)
        return (name.stem if self.is_file else name.name) or self.bucket


RemoteSource = HubSource | S3Source


def _safe_path(path: str, source: str) -> str:
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise SourceError(f"source {source!r}: {path!r} is not a plain relative path")
    return path


def parse_source(text: str) -> RemoteSource | None:
    """The remote source ``text`` names, or ``None`` for a local path or bundled alias; ``SourceError`` when it
    has a scheme but is not a valid ``hf://`` or ``s3://`` source."""
    scheme = _SCHEME.match(text)
    if scheme is None:
        return None
    if scheme["scheme"] == "hf":
        match = _HF.match(text)
        if match is None:
            raise SourceError(
                f"source {text!r}: expected hf://ORG/REPO[@REVISION] or hf://ORG/REPO[@REVISION]/FILE.gguf"
            )
        filename = match["file"]
        if filename is not None:
            if not filename.endswith(".gguf"):
                raise SourceError(
                    f"source {text!r}: only a .gguf file of a repo can be named "
                    "(hf://ORG/REPO[@REVISION]/FILE.gguf); for a Hugging Face model name the repo alone"
                )
            _safe_path(filename, text)
        return HubSource(match["repo"], match["revision"] or "main", filename)
    if scheme["scheme"] == "s3":
        match = _S3.match(text)
        if match is None:
            raise SourceError(
                f"source {text!r}: expected s3://BUCKET/PREFIX or s3://BUCKET/KEY.gguf "
                "(a bucket name is 3 to 63 lowercase letters, digits, dots and hyphens)"
            )
        key = (match["key"] or "").strip("/")
        if key:
            _safe_path(key, text)
        return S3Source(match["bucket"], key)
    if scheme["scheme"] == "pvc":
        raise SourceError(
            f"source {text!r}: a pvc:// source is mounted into the pods by the operator, not fetched; "
            "give the path it is mounted at"
        )
    raise SourceError(f"source {text!r}: unsupported scheme {scheme['scheme']}://; supported: {SUPPORTED}")
