"""Chooses the device, dtype, quantization and thread count for the hardware the engine runs on.

Pure functions of what was asked and what the machine has (CPU flags, whether CUDA is there, the checkpoint's
own dtype and format), so every branch, the AVX2-only CPU included, is tested by feeding it flag sets. Each
returns the choice together with the reason the start-up log prints, and a warning when what was asked works
but will be slow. What cannot work at all raises ``ValueError`` naming the option.

- dtype ``auto``: on CUDA the checkpoint's half-precision dtype (bf16 for fp32 and quantized checkpoints where
  the GPU has it); on a CPU bf16 only where it computes bf16 natively (``avx512_bf16`` or AMX), else fp32:
  torch emulates bf16 on AVX2-only CPUs at a third of fp32's speed. An fp32 Hugging Face checkpoint stays fp32.
- quantization ``auto``: ``int4`` for a GGUF file whose linear weights are Q4_0/Q4_1 (its own 4-bit codes,
  repacked exactly), on a CPU, in bf16, or in fp32 where shoal's C kernel serves (it quantizes either to int8
  itself: an AVX2-only CPU's fp32 default gets 4-bit weights too); ``none`` otherwise (torch's CPU int4/int8
  kernels are fast only with bf16 activations, and they are CPU kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.cpu_features import native_bf16, native_fp16

DEVICES = ("auto", "cpu", "cuda")
QUANTIZATIONS = ("auto", "none", "int4", "int8")
INT4_SOURCE_TYPES = frozenset({"Q4_0", "Q4_1"})
C_KERNEL_DTYPES = frozenset({"bfloat16", "float32"})  # the activations shoal's C kernel takes
SMALL_ROWS = 4  # decode steps of up to this many sequences are timed as their own kind (StepThreads)


@dataclass(frozen=True)
class Choice:
    """A chosen value, why, and a warning when it was asked for but will be slow."""

    value: str
    reason: str
    warning: str | None = None


def choose_device(requested: str, cuda_available: bool) -> Choice:
    if requested not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cuda" and not cuda_available:
        raise ValueError(
            "device='cuda' (--device cuda) but torch sees no CUDA GPU (torch.cuda.is_available() is false); "
            "use --device cpu or --device auto"
        )
    if requested == "auto":
        return Choice("cuda", "a CUDA GPU is available") if cuda_available else Choice("cpu", "no CUDA GPU")
    return Choice(requested, "asked for")


def choose_dtype(
    requested: str,
    device: str,
    cpu_flags: frozenset[str],
    checkpoint_dtype: str | None,
    cuda_bf16: bool = True,
) -> Choice:
    """``checkpoint_dtype``: a Hugging Face config's ``torch_dtype``, or None for a GGUF (quantized) file."""
    if requested != "auto":
        return Choice(requested, "asked for (--dtype)", _slow_dtype_warning(requested, device, cpu_flags))
    if device == "cuda":
        if checkpoint_dtype in ("bfloat16", "float16"):
            return Choice(checkpoint_dtype, "the checkpoint's dtype on CUDA")
        half = "bfloat16" if cuda_bf16 else "float16"
        return Choice(half, f"CUDA runs a {checkpoint_dtype or 'quantized'} checkpoint in half precision")
    if checkpoint_dtype == "float32":
        return Choice("float32", "the checkpoint is float32")
    if native_bf16(cpu_flags):
        return Choice("bfloat16", "the CPU computes bf16 natively (avx512_bf16/amx_bf16)")
    return Choice("float32", "the CPU has no native bf16 (no avx512_bf16/amx_bf16): bf16 would be emulated, ~3x slower")


def _slow_dtype_warning(dtype: str, device: str, cpu_flags: frozenset[str]) -> str | None:
    if device != "cpu":
        return None
    if dtype == "bfloat16" and not native_bf16(cpu_flags):
        return (
            "--dtype bfloat16 on a CPU without native bf16 (no avx512_bf16/amx_bf16 flag): torch emulates it, "
            "expect about a third of float32's speed; --dtype auto picks float32 here"
        )
    if dtype == "float16" and not native_fp16(cpu_flags):
        return "--dtype float16 on a CPU without native fp16 (no avx512_fp16/amx_fp16): expect it to be slow"
    return None


def choose_quantization(
    requested: str,
    device: str,
    dtype: str,
    source_format: str,
    linear_weight_types: frozenset[str],
    c_kernel: bool = False,
) -> Choice:
    """``linear_weight_types``: GGUF type names of the checkpoint's projection weights (empty for HF);
    ``c_kernel``: whether shoal's C kernel serves int4 in this process (it takes fp32 activations too)."""
    if requested not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {requested!r}")
    if requested == "auto":
        if device != "cpu":
            return Choice("none", "quantized weights run on the CPU kernels only")
        if source_format != "gguf" or not linear_weight_types or not linear_weight_types <= INT4_SOURCE_TYPES:
            return Choice("none", "the checkpoint's weights are not 4-bit (GGUF Q4_0/Q4_1)")
        if dtype != "bfloat16" and not (c_kernel and dtype in C_KERNEL_DTYPES):
            return Choice(
                "none", f"torch's int4 CPU kernel is slow with {dtype} activations and shoal's C kernel is unavailable"
            )
        served = f"served as int4 on shoal's C kernel with {dtype} activations" if c_kernel else "served as int4"
        return Choice("int4", f"the GGUF stores {'/'.join(sorted(linear_weight_types))} weights: {served}")
    if requested == "none":
        return Choice("none", "asked for (--quantization)")
    if device != "cpu":
        raise ValueError(
            f"quantization={requested!r} (--quantization) runs on torch's CPU kernels only; "
            f"use --quantization none with --device {device}"
        )
    if requested == "int4" and c_kernel and dtype in C_KERNEL_DTYPES:
        return Choice(requested, f"asked for (--quantization), on shoal's C kernel with {dtype} activations")
    if dtype != "bfloat16":
        c_kernel_note = " (shoal's C kernel, which takes float32, is unavailable)" if requested == "int4" else ""
        raise ValueError(
            f"quantization={requested!r} (--quantization) needs --dtype bfloat16: torch's {requested} CPU kernel "
            f"runs 10-100x slower with {dtype} activations{c_kernel_note}"
        )
    return Choice(requested, "asked for (--quantization)")


def choose_threads(requested: int | None, cores: int, device: str = "cpu") -> Choice:
    """torch's intra-op threads for a server: ``--threads``, else every CPU or one fewer (left to the HTTP event
    loop), whichever is measured faster, for small decode steps and for the rest apart (``StepThreads``).
    On CUDA the GPU runs the steps and their time does not depend on the CPU thread count (on an H100 the
    per-step choice switched counts on timings that differed only by noise): one fewer than the CPUs, fixed.

    torch's OpenMP workers spin at a barrier after every op; when they share every core with the event loop
    (and the step thread's own Python), each of a decode step's ~600 small ops can wait for a descheduled
    worker. Measured here on 2 CPUs shared with a load average of ~20: 2 threads served one stream at ~2.8 s per
    token, 1 thread at ~0.25 s; on the idle machine 2 threads were 1.3x faster. Hence measured, not assumed.
    More threads than CPUs is allowed but warned about.
    """
    if requested is not None:
        if requested < 1:
            raise ValueError(f"threads (--threads) must be >= 1, got {requested}")
        warning = None
        if requested > cores:
            warning = f"--threads {requested} exceeds the {cores} CPUs this process may use: threads will contend"
        return Choice(str(requested), "asked for (--threads)", warning)
    if threads_per_step(requested, cores, device):
        return Choice(
            f"{cores - 1}-{cores}",
            f"{cores} CPUs: all of them or one fewer (left to the event loop), whichever is measured faster, for "
            f"decode steps of up to {SMALL_ROWS} sequences and for the rest apart",
        )
    if cores >= 2:
        return Choice(str(cores - 1), f"{cores} CPUs, steps on the GPU: one left to the event loop")
    return Choice("1", "1 CPU")


def threads_per_step(requested: int | None, cores: int, device: str) -> bool:
    """Whether the thread count is picked per step (``StepThreads``): on a CPU of 2+ cores, with no ``--threads``."""
    return requested is None and cores >= 2 and device == "cpu"
