"""Loads a kernel's C source as a shared library through ctypes, or says why it cannot serve in this process.

torch's wheel ships its own ``libgomp.so.1``; the libraries ask for the same soname, so the dynamic loader
hands them torch's copy and every kernel shares torch's one OpenMP thread pool. ``load_library`` checks that:
two runtimes would each start a pool and oversubscribe the CPUs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

from shoal.kernels.cpu.build import NATIVE_FLAGS, BuildError, built_library

MAPS = Path("/proc/self/maps")


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
    runtimes = openmp_runtimes()
    if len(runtimes) > 1:
        raise KernelUnavailable(
            f"two OpenMP runtimes in the process ({', '.join(sorted(runtimes))}): their thread pools would "
            "oversubscribe the CPUs"
        )
    return library


def openmp_runtimes(maps: Path = MAPS) -> set[str]:
    """The OpenMP runtime files mapped into this process (``libgomp``, ``libiomp``, ``libomp``)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return set()
    paths = {line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6}
    return {p for p in paths if Path(p).name.startswith(("libgomp", "libiomp", "libomp"))}
