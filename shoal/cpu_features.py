"""What the CPU computes natively, read from ``/proc/cpuinfo`` (torch-free: the benchmarks report it too).

Machines of one kind ship with different CPUs: some with AVX-512 and native bf16 (``avx512_bf16``, AMX),
others with AVX2 only, where torch emulates bf16 arithmetic and runs it several times slower than fp32. The
engine picks its dtype from these flags, and every benchmark figure is printed next to them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# The flags that decide the engine's speed, in the order the reports print them (the VNNI ones pick the path
# of the C kernel for quantized decode rows, shoal/kernels/cpu).
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16", "avx512_vnni", "avx_vnni")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
FP16_FLAGS = frozenset({"avx512_fp16", "amx_fp16"})


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: frozenset[str]
    cores: int  # CPUs this process may run on

    @property
    def native_bf16(self) -> bool:
        return native_bf16(self.flags)

    def summary(self) -> str:
        """``"<model>, N cpus, avx2 avx512f avx512_bf16 amx_bf16"``: the line every benchmark figure carries."""
        present = [f for f in REPORTED_FLAGS if f in self.flags] or ["none of " + "/".join(REPORTED_FLAGS)]
        return f"{self.model}, {self.cores} cpus, {' '.join(present)}"


def native_bf16(flags: frozenset[str]) -> bool:
    """bf16 arithmetic in hardware: AVX-512 BF16 dot products or AMX tiles."""
    return bool(flags & BF16_FLAGS)


def native_fp16(flags: frozenset[str]) -> bool:
    return bool(flags & FP16_FLAGS)


def parse_cpuinfo(text: str, cores: int) -> CpuInfo:
    """The first processor's model name and flags (x86 ``flags``, Arm ``Features``)."""
    model, flags = "unknown CPU", ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = value
    return CpuInfo(model=model, flags=frozenset(flags.split()), cores=cores)


@lru_cache(maxsize=1)
def cpu_info(path: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    """This machine's CPU; without a readable cpuinfo, no flags (the engine then picks the safe fp32)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        return parse_cpuinfo(path.read_text(), cores)
    except OSError:
        return CpuInfo(model="unknown CPU", flags=frozenset(), cores=cores)
