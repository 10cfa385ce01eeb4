"""Reads a GGUF file's header: its key/value metadata into plain Python values (torch-free: the tokenizer needs
it too), and its tensor index as numpy views of the mapped file (``open_gguf``, for the engine's loader).

Both parse the header themselves, straight from the file's bytes: the ``gguf`` package's reader builds a numpy
view per field part, which takes seconds over a 49k-entry vocabulary (and holds the GIL all along, stalling a
gateway that loads a tokenizer while it serves, and adding 3-10 s to every engine start on two shared cores).
The tensors are what that reader gives (``GgufTensor`` has the fields of its ``ReaderTensor`` the engine uses).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.quants import quant_shape_to_byte_shape

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


_ALIGNMENT = 32  # GGUF's default, unless ``general.alignment`` says otherwise
_PLAIN = {
    gguf.GGMLQuantizationType.F16: np.float16,
    gguf.GGMLQuantizationType.F32: np.float32,
    gguf.GGMLQuantizationType.F64: np.float64,
    gguf.GGMLQuantizationType.I8: np.int8,
    gguf.GGMLQuantizationType.I16: np.int16,
    gguf.GGMLQuantizationType.I32: np.int32,
    gguf.GGMLQuantizationType.I64: np.int64,
}


@dataclass(frozen=True)
class GgufTensor:
    """One tensor as ``gguf.ReaderTensor`` has it: ``shape`` innermost dimension first, as the file stores it;
    ``data`` a read-only view of the mapped file, elements in row-major order, or a quantized type's bytes."""

    name: str
    tensor_type: gguf.GGMLQuantizationType
    shape: np.ndarray
    data: np.ndarray


@dataclass(frozen=True)
class GgufFile:
    tensors: list[GgufTensor]


def open_gguf(path: Path) -> GgufFile:
    """Memory-maps the file for its tensors; an unreadable or non-GGUF file is an error naming the path.

    Indexes are cached per file version: an engine opens the file for its plan, its config and its weights.
    """
    try:
        stat = Path(path).stat()
        return _cached_index(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError, struct.error, UnicodeDecodeError, IndexError) as exc:
        raise ValueError(f"cannot read GGUF file {str(path)!r}: {exc}") from exc


@lru_cache(maxsize=4)
def _cached_index(path: str, _mtime_ns: int, _size: int) -> GgufFile:
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as header:
        parser = _MetadataParser(header)
        metadata = parser.parse()
        entries = [parser.tensor_entry() for _ in range(parser.tensor_count)]
        offset = parser.offset
    alignment = int(metadata.get("general.alignment", _ALIGNMENT))
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"general.alignment must be a power of two, got {alignment}")
    start = offset + (-offset % alignment)
    mapped = np.memmap(path, mode="r")
    tensors, names = [], set()
    for name, dims, raw_type, tensor_offset in entries:
        if name in names:
            raise ValueError(f"tensor {name!r} appears twice")
        names.add(name)
        kind = gguf.GGMLQuantizationType(raw_type)
        elements = int(np.prod(dims))
        block, type_size = gguf.GGML_QUANT_SIZES[kind]
        at = start + tensor_offset
        shape = tuple(reversed(dims))
        if kind in _PLAIN:
            data = mapped[at : at + elements * np.dtype(_PLAIN[kind]).itemsize].view(_PLAIN[kind]).reshape(shape)
        else:
            data = mapped[at : at + elements * type_size // block].reshape(quant_shape_to_byte_shape(shape, kind))
        tensors.append(GgufTensor(name, kind, np.asarray(dims, dtype=np.uint64), data))
    return GgufFile(tensors)


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
        self.tensor_count = 0

    def parse(self) -> dict[str, Any]:
        if self.data[:4] != _MAGIC:
            raise ValueError("not a GGUF file (bad magic)")
        self.offset = 4
        version = self._unpack(_U32)
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        self.tensor_count = self._unpack(_U64)  # the tensor index follows the fields (``tensor_entry``)
        fields = self._unpack(_U64)
        metadata: dict[str, Any] = {}
        for _ in range(fields):
            key = self._string()
            metadata[key] = self._value(self._unpack(_U32))
        return metadata

    def tensor_entry(self) -> tuple[str, list[int], int, int]:
        """One entry of the tensor index, after the fields: name, dimensions, type, offset in the data."""
        name = self._string()
        dims = [self._unpack(_U64) for _ in range(self._unpack(_U32))]
        return name, dims, self._unpack(_U32), self._unpack(_U64)

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
