"""Reads a GGUF file's key/value metadata into plain Python values (torch-free: the tokenizer needs it too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf


def open_gguf(path: Path) -> gguf.GGUFReader:
    """Memory-maps the file; an unreadable or non-GGUF file is an error naming the path."""
    try:
        return gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read GGUF file {str(path)!r}: {exc}") from exc


def gguf_metadata(reader: gguf.GGUFReader) -> dict[str, Any]:
    """Every metadata field as str/int/float/bool or a list of them."""
    return {key: field.contents() for key, field in reader.fields.items()}
