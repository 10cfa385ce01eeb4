"""Loads a kernel's C source as a shared library through ctypes, or says why it cannot serve in this process.

torch's wheel ships its own ``libgomp.so.1``; the libraries ask for the same soname, so the dynamic loader
hands them torch's copy and every kernel shares torch's one OpenMP thread pool. ``load_library`` checks that
the library's OpenMP entry point is torch's: another runtime would start a second pool and oversubscribe the
CPUs. Other runtimes merely present in the process (sentencepiece's wheel vendors a renamed ``libgomp``, and
``gguf`` imports sentencepiece when it is installed) are none of the kernels' business.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from shoal.kernels.cpu.build import NATIVE_FLAGS, BuildError, built_library

OPENMP_ENTRY = "GOMP_parallel"  # what every ``#pragma omp parallel`` compiles to with GCC


class KernelUnavailable(RuntimeError):
    """A C kernel cannot serve in this process; the message says why."""


def load_library(source: Path, flags: Sequence[str] = NATIVE_FLAGS, cc: str | None = None) -> ctypes.CDLL:
    """Builds ``source`` (once per machine, see ``build``) and loads it; ``KernelUnavailable`` says why not."""
    try:
        path = built_library(source, flags, cc)
    except BuildError as exc:
        raise KernelUnavailable(str(exc)) from exc
    try:
        library = ctypes.CDLL(str(path))
    except OSError as exc:
        raise KernelUnavailable(f"cannot load {str(path)!r}: {exc}") from exc
    ours, torchs = defining_file(library, OPENMP_ENTRY), torch_openmp_runtime()
    if ours is not None and ours != torchs:
        raise KernelUnavailable(
            f"the kernel's OpenMP runtime ({ours}) is not torch's ({torchs or 'none found'}): their two thread "
            "pools would oversubscribe the CPUs"
        )
    return library


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def defining_file(library: ctypes.CDLL, symbol: str) -> str | None:
    """The file that defines ``symbol`` as ``library`` resolves it (itself or a dependency), or None if
    nothing does."""
    try:
        address = ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
    except AttributeError:
        return None
    info = _DlInfo()
    if not ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode())


def torch_openmp_runtime() -> str | None:
    """The OpenMP runtime torch's CPU library runs its parallel regions on."""
    return defining_file(ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")), OPENMP_ENTRY)


def entry_point(function: Any) -> int:
    """A loaded C function's address, for a struct's function-pointer field."""
    address = ctypes.cast(function, ctypes.c_void_p).value
    if not address:
        raise KernelUnavailable("a kernel's entry point has no address")
    return address
