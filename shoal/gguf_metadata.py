"""Reads a GGUF file's key/value metadata into plain Python values (torch-free: the tokenizer needs it too).

``read_gguf_metadata`` parses the header itself, straight from the file's bytes: the ``gguf`` package's reader
builds a numpy view per field part, which takes seconds over a 49k-entry vocabulary (and holds the GIL all
along, stalling a gateway that loads a tokenizer while it serves). The engine still uses that reader for the
tensors (``open_gguf``).
"""

from __future__ import annotations

import mmap
import struct
from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf

_MAGIC = b"GGUF"
_SCALARS: dict[int, struct.Struct] = {
    0: struct.Struct("<B"),
    1: struct.Struct("<b"),
    2: struct.Struct("<H"),
    3: struct.Struct("<h"),
    4: struct.Struct("<I"),
    5: struct.Struct("<i"),
    6: struct.Struct("<f"),
    7: struct.Struct("<?"),
    10: struct.Struct("<Q"),
    11: struct.Struct("<q"),
    12: struct.Struct("<d"),
}
_STRING, _ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


def open_gguf(path: Path) -> gguf.GGUFReader:
    """Memory-maps the file for its tensors; an unreadable or non-GGUF file is an error naming the path.

    Readers are cached per file version: an engine opens the file for its config and again for its weights.
    """
    try:
        stat = Path(path).stat()
        return _cached_reader(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read GGUF file {str(path)!r}: {exc}") from exc


@lru_cache(maxsize=4)
def _cached_reader(path: str, _mtime_ns: int, _size: int) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """Every metadata field as str/int/float/bool or a list of them; a malformed file is an error naming it."""
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _MetadataParser(data).parse()
    except (OSError, ValueError, struct.error, UnicodeDecodeError, IndexError) as exc:
        raise ValueError(f"cannot read GGUF file {str(path)!r}: {exc}") from exc


class _MetadataParser:
    """GGUF v2/v3: magic, version, tensor count, field count, then each field as key, type and value."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.offset = 0

    def parse(self) -> dict[str, Any]:
        if self.data[:4] != _MAGIC:
            raise ValueError("not a GGUF file (bad magic)")
        self.offset = 4
        version = self._unpack(_U32)
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        self._unpack(_U64)  # tensor count: the tensors are not read here
        fields = self._unpack(_U64)
        metadata: dict[str, Any] = {}
        for _ in range(fields):
            key = self._string()
            metadata[key] = self._value(self._unpack(_U32))
        return metadata

    def _unpack(self, layout: struct.Struct) -> Any:
        (value,) = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return value

    def _string(self) -> str:
        length = self._unpack(_U64)
        start = self.offset
        self.offset += length
        if self.offset > len(self.data):
            raise ValueError("a string runs past the end of the file")
        return self.data[start : self.offset].decode("utf-8")

    def _value(self, kind: int) -> Any:
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item_kind, count = self._unpack(_U32), self._unpack(_U64)
            if item_kind == _STRING:
                return [self._string() for _ in range(count)]
            if item_kind in _SCALARS:
                layout = _SCALARS[item_kind]
                items = struct.Struct(f"<{count}{layout.format[1:]}")
                values = list(items.unpack_from(self.data, self.offset))
                self.offset += items.size
                return values
            return [self._value(item_kind) for _ in range(count)]
        if kind in _SCALARS:
            return self._unpack(_SCALARS[kind])
        raise ValueError(f"unknown GGUF value type {kind} at byte {self.offset}")
