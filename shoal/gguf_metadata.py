"""Reads a GGUF file's key/value metadata into plain Python values (torch-free: the tokenizer needs it too)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf


def open_gguf(path: Path) -> gguf.GGUFReader:
    """Memory-maps the file; an unreadable or non-GGUF file is an error naming the path.

    Parsing the header takes seconds (a 49k-entry vocabulary), and an engine opens the file twice (tokenizer and
    weights), so readers are cached per file version.
    """
    try:
        stat = Path(path).stat()
        return _cached_reader(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read GGUF file {str(path)!r}: {exc}") from exc


@lru_cache(maxsize=4)
def _cached_reader(path: str, _mtime_ns: int, _size: int) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)


def gguf_metadata(reader: gguf.GGUFReader) -> dict[str, Any]:
    """Every metadata field as str/int/float/bool or a list of them."""
    return {key: field.contents() for key, field in reader.fields.items()}
