"""A node-local cache of converted weights: the tensors the loader made of a checkpoint, written once and mapped by
the next engine instead of converting the checkpoint again.

Converting SmolLM2's GGUF (dequantizing its blocks, un-permuting Q/K, fusing Q/K/V and gate/up, casting to bf16,
laying out the Q4/Q8 codes for shoal's C kernel) is most of an engine's ``loading`` phase, and its result depends
only on the file and on how this engine converts. So an entry is keyed by everything those bytes depend on: the
source files' identity (resolved path, size, ``mtime_ns``), the dtype, the quantization and the kernel whose
layout the codes take, the device, the CPU's reported flags (``shoal.cpu_features``: they decide the dtype and
the kernel's build), torch's and shoal's versions, and ``FORMAT_VERSION`` (raised whenever the loader's output
changes). Two machines with different CPUs sharing a claim each get an entry of their own; a changed file is a
new key, so a miss.

An entry is a directory ``<name>-<key>/`` holding ``weights.bin`` (each tensor's bytes, 64-byte aligned; a tensor
two names share, a tied LM head, once) and ``index.json`` (per tensor: name, dtype, shape, offset, nbytes; the
file's size). It is written under a temporary name and renamed into place, so a crash, or two engines writing
at once, never leave half an entry. A reader checks the index against the file (format, key, size, every tensor
inside it) and maps the file copy-on-write (``torch.from_file``): the loader then places the tensors as it does
any others (into huge pages on a CPU). What is cached stops before oneDNN's packing: a packed weight is an
opaque tensor torch cannot rebuild from bytes, so it is packed again from the cached dense weight.

The cache never fails a start: an entry that does not check is logged, converted again and rewritten; a
directory that cannot be written (read-only, full) is logged and the engine serves without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import shoal
from shoal.cpu_features import REPORTED_FLAGS, cpu_info
from shoal.engine.loader.quantize import QuantizedLayout

log = logging.getLogger(__name__)
FORMAT_VERSION = 1
ALIGN = 64
INDEX, DATA = "index.json", "weights.bin"
DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float32, torch.bfloat16, torch.float16, torch.uint8, torch.int8, torch.int32)
}


class BadEntry(ValueError):
    """An entry whose index does not match its data file (or is no index at all)."""


@dataclass(frozen=True)
class Converted:
    """A model's weights as the loader leaves them before oneDNN packing: the state dict the model loads (tied
    names share one tensor) and each quantized projection's layout, by module name."""

    state: dict[str, Tensor]
    quantized: dict[str, QuantizedLayout]


class WeightsCache:
    """One engine's use of the directory ``root`` (``--weights-cache-dir``); ``outcome`` says what it did, for
    the start-up plan."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.outcome = f"converted cache miss ({root})"

    def entry(self, name: str, files: Iterable[Path], **settings: Any) -> Path:
        """The entry for these source files converted with these settings (dtype, quantization...); ``name``
        (the model's) begins the directory's name, for people."""
        files = [Path(f).resolve() for f in files]
        cpu = cpu_info()
        parts = {
            "format": FORMAT_VERSION,
            "shoal": shoal.__version__,
            "torch": torch.__version__,
            "cpu": sorted(f for f in REPORTED_FLAGS if f in cpu.flags),
            "files": [_identity(f) for f in files],
            **settings,
        }
        key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]
        return self.root / f"{re.sub(r'[^A-Za-z0-9._-]+', '-', name).strip('.-')[:64]}-{key}"

    def read(self, entry: Path) -> Converted | None:
        """The entry's tensors, mapped; None on a miss or on an entry that does not check (logged)."""
        if not (entry / INDEX).exists():
            return None
        try:
            converted = _mapped(entry)
        except (OSError, BadEntry) as exc:
            self.reject(entry, exc)
            return None
        self.outcome = f"converted cache hit ({entry})"
        return converted

    def reject(self, entry: Path, reason: Exception) -> None:
        """An entry found unusable: logged once, converted again, rewritten."""
        log.warning(
            "converted weights %s are unusable (%s): converting from the source and rewriting them", entry, reason
        )
        self.outcome = f"converted cache miss, entry unusable ({entry})"

    def write(self, entry: Path, converted: Converted) -> None:
        """Writes the entry under a temporary name and renames it into place; a failure is logged, never raised."""
        staging = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{entry.name}."))
            staging.chmod(0o755)  # mkdtemp's 0700 would hide the entry from engines running as another user
            _write(staging, converted)
            _publish(staging, entry)
        except OSError as exc:
            log.warning("converted weights cache %s cannot be written (%s): serving without it", self.root, exc)
            self.outcome = f"converted cache miss, not written ({exc.strerror or exc})"
            return
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)  # gone already once published
        self.outcome = f"converted cache miss, written ({entry})"


def _identity(path: Path) -> list[Any]:
    stat = path.stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]


class _DataFile:
    """``weights.bin`` being written: each tensor's bytes once, 64-byte aligned; its index records."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "wb")  # noqa: SIM115 (closed by ``close``)
        self.size = 0
        self.records: dict[tuple[int, str, tuple[int, ...]], dict[str, Any]] = {}

    def add(self, tensor: Tensor) -> dict[str, Any]:
        key = (tensor.data_ptr(), str(tensor.dtype), tuple(tensor.shape))
        if key not in self.records:
            raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
            self.file.write(b"\0" * (-self.size % ALIGN))
            self.size += -self.size % ALIGN
            self.file.write(raw.data)
            dtype = str(tensor.dtype).removeprefix("torch.")
            self.records[key] = {"dtype": dtype, "shape": list(tensor.shape), "offset": self.size, "nbytes": raw.nbytes}
            self.size += raw.nbytes
        return self.records[key]

    def close(self) -> None:
        """Flushed to the disk before the index names it."""
        with self.file:
            self.file.flush()
            os.fsync(self.file.fileno())


def _write(directory: Path, converted: Converted) -> None:
    """``weights.bin`` then ``index.json`` into ``directory``, both flushed to the disk."""
    data = _DataFile(directory / DATA)
    try:
        state = [{"name": name, **data.add(t)} for name, t in converted.state.items()]
        quantized = {
            name: {"kind": q.kind, "packed": data.add(q.packed), "scales": data.add(q.scales)}
            for name, q in converted.quantized.items()
        }
    finally:
        data.close()
    index = {"format": FORMAT_VERSION, "size": data.size, "state": state, "quantized": quantized}
    with open(directory / INDEX, "w") as file:
        json.dump(index, file)
        file.flush()
        os.fsync(file.fileno())


def _publish(staging: Path, entry: Path) -> None:
    """Renames ``staging`` to ``entry``; an entry already there (unusable, or another engine's) is moved aside
    first and removed. Where another engine renames its own in between, that one stays."""
    try:
        os.rename(staging, entry)
        return
    except OSError:
        if not entry.exists():
            raise
    aside = entry.with_name(f".{entry.name}.old-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(entry, aside)
        os.rename(staging, entry)
    except OSError:
        if not entry.exists():
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _mapped(entry: Path) -> Converted:
    """The entry's tensors as views of its data file mapped copy-on-write; ``BadEntry`` where the index does not
    describe the file."""
    try:
        index = json.loads((entry / INDEX).read_text())
        return _views(index, entry / DATA)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError and BadEntry: ValueErrors
        if isinstance(exc, BadEntry):
            raise
        raise BadEntry(f"{INDEX}: {type(exc).__name__}: {exc}") from exc


def _views(index: dict[str, Any], path: Path) -> Converted:
    size = int(index["size"])
    if index["format"] != FORMAT_VERSION:
        raise BadEntry(f"format {index['format']}, not {FORMAT_VERSION}")
    found = path.stat().st_size
    if found != size:
        raise BadEntry(f"{DATA} holds {found} bytes, its index says {size}")
    whole = torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8)
    views: dict[tuple[int, str, str], Tensor] = {}  # a tensor two names share stays one tensor

    def tensor(record: dict[str, Any]) -> Tensor:
        offset, nbytes, dtype = int(record["offset"]), int(record["nbytes"]), DTYPES[record["dtype"]]
        shape = [int(d) for d in record["shape"]]
        if nbytes != math.prod(shape) * dtype.itemsize or offset % ALIGN or offset < 0 or offset + nbytes > size:
            raise BadEntry(f"tensor {record} does not fit the {size} bytes of {DATA}")
        key = (offset, record["dtype"], str(shape))
        if key not in views:
            views[key] = whole[offset : offset + nbytes].view(dtype).view(shape)
        return views[key]

    state = {str(r["name"]): tensor(r) for r in index["state"]}
    quantized = {
        str(name): QuantizedLayout(str(q["kind"]), tensor(q["packed"]), tensor(q["scales"]))
        for name, q in index["quantized"].items()
    }
    return Converted(state, quantized)
