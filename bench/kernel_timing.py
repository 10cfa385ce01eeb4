"""Kernel benchmark: decode attention's achieved HBM bandwidth and prefill attention's TFLOP/s on a GPU.

Before timing anything it checks each kernel's output against the torch reference on the same batch (the
"max err" column) and exits 1 if one is off, so a GPU run is also the compiled kernels' correctness check.
Every figure comes with a baseline measured in the same run: decode bandwidth against a device-to-device copy
of the same number of bytes (the practical ceiling) and the device's nominal peak where known, and against the
torch reference on the same batch; prefill throughput against PyTorch SDPA (flash attention over dense,
unpaged tensors) and the torch reference. A third table runs both kernels with a sliding window and a soft cap
against the same kernels without them on the same batch: a decode over a context four times its window should
cost about what a context of one window does, since the kernels skip the tiles before the window. Without a GPU it says so and exits 0; ``--smoke`` instead runs the
same code on tiny shapes under the Triton interpreter, to check the script itself (its figures mean nothing).

    python bench/kernel_timing.py [--dtype bfloat16] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

# Nominal HBM bandwidth in GB/s by device-name fragment (vendor data sheets).
PEAK_HBM_GBPS = {
    "H200": 4800,
    "H100 SXM": 3350,
    "H100 NVL": 3900,
    "H100 PCIe": 2000,
    "H100": 3350,
    "A100-SXM4-80GB": 2039,
    "A100 80GB PCIe": 1935,
    "A100": 1555,
    "L40S": 864,
    "L4": 300,
}


@dataclass
class Shapes:
    decode: list[tuple[int, int]]  # (num_seqs, context length)
    prefill: list[tuple[int, int]]  # (num_seqs, prompt length)
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    block_size: int = 16
    # (kernel, num_seqs, context, sliding window, soft cap or None)
    windowed: list[tuple[str, int, int, int, float | None]] | None = None


# max |triton - reference| allowed per dtype for outputs of magnitude ~1
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}
FULL = Shapes(
    decode=[(1, 8192), (8, 4096), (64, 2048), (256, 1024)],
    prefill=[(1, 4096), (4, 2048), (16, 512)],
    windowed=[("decode", 1, 16384, 4096, None), ("decode", 64, 8192, 2048, 50.0), ("prefill", 1, 4096, 1024, 50.0)],
)
SMOKE = Shapes(
    decode=[(2, 80)],
    prefill=[(2, 40)],
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
    windowed=[("decode", 2, 80, 24, None), ("prefill", 2, 40, 16, 2.0)],
)


def timed(fn: Callable[[], object], device: str, repeats: int) -> float:
    """Median seconds per call after a warm-up call."""
    import torch

    fn()
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return sorted(samples)[len(samples) // 2]


def paged_batch(shapes: Shapes, query_lens: list[int], seq_lens: list[int], dtype, device: str):
    """Caches with every sequence's blocks shuffled over the cache, as a long-running engine leaves them."""
    import torch

    from shoal.kernels import AttentionMetadata

    bs = shapes.block_size
    needed = [-(-s // bs) for s in seq_lens]
    order = torch.randperm(sum(needed)).tolist()
    tables, used = [], 0
    for n in needed:
        tables.append(order[used : used + n])
        used += n
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, bs, device=device)
    cache_shape = (sum(needed), bs, shapes.num_kv_heads, shapes.head_dim)
    k_cache = torch.randn(cache_shape, dtype=dtype, device=device)
    v_cache = torch.randn(cache_shape, dtype=dtype, device=device)
    query = torch.randn(sum(query_lens), shapes.num_heads, shapes.head_dim, dtype=dtype, device=device)
    return query, k_cache, v_cache, meta


def max_error(triton_ops, torch_ops, query, k_cache, v_cache, meta, scale, window=None, softcap=None) -> float:
    ours = triton_ops.attention(query, k_cache, v_cache, meta, scale, window, softcap)
    expected = torch_ops.attention(query, k_cache, v_cache, meta, scale, window, softcap)
    return float((ours.float() - expected.float()).abs().max())


@dataclass
class DecodeFigures:
    """One decode batch: the kernel against the reference and a same-size copy (seconds, bytes moved)."""

    max_err: float
    seconds: float
    reference_seconds: float
    copy_seconds: float
    moved_bytes: int

    @property
    def gbps(self) -> float:
        return self.moved_bytes / self.seconds / 1e9


@dataclass
class PrefillFigures:
    """One prefill batch: the kernel against the reference and SDPA's flash attention on dense tensors."""

    max_err: float
    seconds: float
    reference_seconds: float
    sdpa_seconds: float
    flops: float


def measure_decode(shapes: Shapes, num_seqs: int, context: int, dtype, device: str, repeats: int) -> DecodeFigures:
    """``num_seqs`` decodes over ``context`` tokens each; bytes moved are the caches read and the queries."""
    import torch

    from shoal.kernels import TorchOps, get_ops

    triton_ops, torch_ops = get_ops("triton", device), TorchOps()
    query, k_cache, v_cache, meta = paged_batch(shapes, [1] * num_seqs, [context] * num_seqs, dtype, device)
    scale = shapes.head_dim**-0.5
    err = max_error(triton_ops, torch_ops, query, k_cache, v_cache, meta, scale)
    ours = timed(partial(triton_ops.attention, query, k_cache, v_cache, meta, scale), device, repeats)
    ref = timed(partial(torch_ops.attention, query, k_cache, v_cache, meta, scale), device, max(1, repeats // 4))
    moved = 2 * k_cache.numel() * k_cache.element_size() + 2 * query.numel() * query.element_size()
    flat = torch.empty(moved // 2, dtype=torch.uint8, device=device)
    copy = timed(flat.clone, device, repeats)  # reads and writes moved/2 bytes: moved in all
    return DecodeFigures(err, ours, ref, copy, moved)


def measure_prefill(shapes: Shapes, num_seqs: int, length: int, dtype, device: str, repeats: int) -> PrefillFigures:
    """``num_seqs`` whole causal prompts of ``length`` tokens."""
    import torch
    import torch.nn.functional as F

    from shoal.kernels import TorchOps, get_ops

    triton_ops, torch_ops = get_ops("triton", device), TorchOps()
    h, d = shapes.num_heads, shapes.head_dim
    query, k_cache, v_cache, meta = paged_batch(shapes, [length] * num_seqs, [length] * num_seqs, dtype, device)
    scale = d**-0.5
    # causal: query i sees i + 1 keys; QK^T and PV are 2 flops per multiply-add each
    flops = 4 * num_seqs * h * d * length * (length + 1) / 2
    err = max_error(triton_ops, torch_ops, query, k_cache, v_cache, meta, scale)
    ours = timed(partial(triton_ops.attention, query, k_cache, v_cache, meta, scale), device, repeats)
    ref = timed(partial(torch_ops.attention, query, k_cache, v_cache, meta, scale), device, max(1, repeats // 4))
    q = query.view(num_seqs, length, h, d).transpose(1, 2)
    k = torch.randn(num_seqs, h, length, d, dtype=dtype, device=device)  # GQA expanded, as SDPA wants it
    v = torch.randn_like(k)
    sdpa = timed(partial(F.scaled_dot_product_attention, q, k, v, is_causal=True, scale=scale), device, repeats)
    return PrefillFigures(err, ours, ref, sdpa, flops)


def bench_decode(shapes: Shapes, dtype, device: str, repeats: int, peak: float | None) -> list[str]:
    rows = [
        "| seqs x context | max err | Triton µs | GB/s | vs copy | vs peak | torch ref µs | speed-up |",
        "|---" * 8 + "|",
    ]
    for num_seqs, context in shapes.decode:
        f = measure_decode(shapes, num_seqs, context, dtype, device, repeats)
        vs_peak = f"{f.gbps / peak:.0%}" if peak else "n/a"
        rows.append(
            f"| {num_seqs} x {context} | {f.max_err:.1e} | {f.seconds * 1e6:.1f} | {f.gbps:.0f} | "
            f"{f.copy_seconds / f.seconds:.0%} | {vs_peak} | {f.reference_seconds * 1e6:.1f} | "
            f"{f.reference_seconds / f.seconds:.1f}x |"
        )
    return rows


def bench_prefill(shapes: Shapes, dtype, device: str, repeats: int) -> list[str]:
    rows = [
        "| seqs x prompt | max err | Triton TFLOP/s | SDPA TFLOP/s | vs SDPA | torch ref TFLOP/s |",
        "|---" * 6 + "|",
    ]
    for num_seqs, length in shapes.prefill:
        f = measure_prefill(shapes, num_seqs, length, dtype, device, repeats)
        rows.append(
            f"| {num_seqs} x {length} | {f.max_err:.1e} | {f.flops / f.seconds / 1e12:.1f} | "
            f"{f.flops / f.sdpa_seconds / 1e12:.1f} | {f.sdpa_seconds / f.seconds:.0%} | "
            f"{f.flops / f.reference_seconds / 1e12:.2f} |"
        )
    return rows


def bench_windowed(shapes: Shapes, dtype, device: str, repeats: int) -> list[str]:
    from shoal.kernels import TorchOps, get_ops

    triton_ops, torch_ops = get_ops("triton", device), TorchOps()
    rows = [
        "| kernel, seqs x context, window, cap | max err | Triton µs | without window and cap µs | speed-up |",
        "|---" * 5 + "|",
    ]
    for kind, num_seqs, context, window, softcap in shapes.windowed or []:
        query_lens = [1 if kind == "decode" else context] * num_seqs
        query, k_cache, v_cache, meta = paged_batch(shapes, query_lens, [context] * num_seqs, dtype, device)
        scale = shapes.head_dim**-0.5
        err = max_error(triton_ops, torch_ops, query, k_cache, v_cache, meta, scale, window, softcap)
        ours = timed(
            partial(triton_ops.attention, query, k_cache, v_cache, meta, scale, window, softcap), device, repeats
        )
        plain = timed(partial(triton_ops.attention, query, k_cache, v_cache, meta, scale), device, repeats)
        rows.append(
            f"| {kind}, {num_seqs} x {context}, {window}, {softcap or '-'} | {err:.1e} | {ours * 1e6:.1f} | "
            f"{plain * 1e6:.1f} | {plain / ours:.1f}x |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes under the Triton interpreter, on CPU")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print(
            "bench/kernel_timing.py: no CUDA GPU here, nothing to measure (the Triton kernels need one; --smoke checks "
            "the script itself)"
        )
        return 0
    device = "cpu" if args.smoke else "cuda"
    dtype = getattr(torch, "float32" if args.smoke else args.dtype)
    shapes = SMOKE if args.smoke else FULL
    repeats = 2 if args.smoke else args.repeats
    name = "CPU (Triton interpreter)" if args.smoke else torch.cuda.get_device_name()
    peak = next((gbps for key, gbps in PEAK_HBM_GBPS.items() if key in name), None)
    torch.manual_seed(0)
    print(
        f"device: {name}; dtype {dtype}; heads {shapes.num_heads}/{shapes.num_kv_heads}, head_dim "
        f"{shapes.head_dim}, block_size {shapes.block_size}; nominal HBM peak {peak or 'unknown'} GB/s\n"
    )
    print("Decode attention (paged, split-KV as TritonOps chooses):")
    decode = bench_decode(shapes, dtype, device, repeats, peak)
    print("\n".join(decode))
    print("\nPrefill attention (paged, causal, whole prompts):")
    prefill = bench_prefill(shapes, dtype, device, repeats)
    print("\n".join(prefill))
    print("\nSliding window and soft cap (the same kernels, compile-time switches):")
    windowed = bench_windowed(shapes, dtype, device, repeats)
    print("\n".join(windowed))
    tolerance = TOLERANCE[str(dtype).removeprefix("torch.")]
    wrong = [row for row in decode[2:] + prefill[2:] + windowed[2:] if float(row.split("|")[2]) > tolerance]
    if wrong:
        print(f"\nFAILED: Triton differs from the torch reference by more than {tolerance} in:\n" + "\n".join(wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
