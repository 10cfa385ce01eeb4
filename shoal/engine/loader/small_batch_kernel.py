"""Which kernel serves the int4 projections' small batches: shoal's C kernel where it builds, else torch's.

The C kernel (``shoal.kernels.cpu``) is built with the machine's C compiler the first time an engine needs it
(about a second; cached per machine afterwards). Where it cannot be (no compiler, a failed build, an OpenMP
runtime other than torch's, no SIMD path for this CPU) the engine still serves, on torch's slower int4 kernel,
and says so in one warning naming the cause: never a silent slow path. Either way the start-up log names the kernel.
``SHOAL_CPU_KERNEL=torch`` picks torch's kernel on purpose (to compare the two, or to rule the C kernel out).
"""

from __future__ import annotations

import logging
import os
from functools import cache

from shoal.kernels.cpu import KernelUnavailable, QuantGemv, load_quant_gemv

log = logging.getLogger(__name__)
ENV = "SHOAL_CPU_KERNEL"
CHOICES = ("auto", "torch")
TORCH_KERNEL = "torch's _weight_int4pack_mm_for_cpu"


def small_batch_kernel() -> QuantGemv | None:
    """The loaded C kernel, or None for torch's; logs which serves and why (once per engine start)."""
    choice = os.environ.get(ENV) or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{ENV} must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "torch":
        log.info("quantized projections: %s (%s=torch)", TORCH_KERNEL, ENV)
        return None
    kernel = _loaded()
    if isinstance(kernel, str):
        log.warning("quantized projections: %s, slower: shoal's C kernel is unavailable: %s", TORCH_KERNEL, kernel)
        return None
    log.info("quantized projections: shoal's C kernel (%s; 4-/8-bit blocks x int8 activations)", kernel.isa)
    return kernel


def c_kernel_serves() -> bool:
    """Whether ``small_batch_kernel`` would answer the C kernel (builds it if need be; logs nothing): the
    quantization choice depends on it, since only the C kernel is fast with float32 activations."""
    return (os.environ.get(ENV) or "auto") != "torch" and not isinstance(_loaded(), str)


@cache
def _loaded() -> QuantGemv | str:
    """The kernel, built and loaded once per process, or why it cannot serve."""
    try:
        kernel = load_quant_gemv()
    except KernelUnavailable as exc:
        return str(exc)
    if kernel.isa == "scalar":
        return "it was built without SIMD (this CPU or compiler lacks AVX2 with FMA and F16C)"
    return kernel
