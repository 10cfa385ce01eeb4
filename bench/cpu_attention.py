"""shoal's C attention kernel on a CPU: the build for this machine against the portable C build, per call.

Both builds of ``shoal/kernels/cpu/paged_attention.c`` are loaded in one process (``-march=native``, and the same
with ``--portable-flags``, by default ``-mno-avx512f -mno-avx2``: the plain C that GCC vectorizes for what is
left) and timed alternately on the same decode batches: SmolLM2-135M's attention shape by default (9 query heads
over 3 KV heads of 64), fp32, 16-token blocks scattered through the cache, every sequence at ``--context``
tokens. Each figure is the least of ``--rounds`` mean times of ``--calls`` calls, in µs per call; JSON on stdout.

    .venv/bin/python bench/cpu_attention.py [--batches 1 64] [--contexts 64 256 1024] [--threads 1]
    .venv/bin/python bench/cpu_attention.py --smoke   # one small batch, few calls: checks that it runs
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from shoal.cpu_features import cpu_info
from shoal.kernels import AttentionMetadata
from shoal.kernels.cpu.build import NATIVE_FLAGS
from shoal.kernels.cpu.paged_attention import PagedAttention, load_paged_attention

BLOCK = 16


def decode_batch(batch: int, context: int, heads: int, kv_heads: int, head_dim: int, seed: int = 0) -> dict[str, Any]:
    """One decode step's query, caches and metadata: ``batch`` sequences of ``context`` tokens in random blocks."""
    gen = torch.Generator().manual_seed(seed)
    per_seq = (context + BLOCK - 1) // BLOCK
    blocks = batch * per_seq + 1
    shape = (blocks, BLOCK, kv_heads, head_dim)
    tables = torch.randperm(blocks, generator=gen)[: batch * per_seq].view(batch, per_seq).to(torch.int32)
    meta = AttentionMetadata(
        query_start_loc=torch.arange(batch + 1, dtype=torch.int32),
        seq_lens=torch.full((batch,), context, dtype=torch.int32),
        block_tables=tables,
        slot_mapping=torch.zeros(batch, dtype=torch.int64),
        max_query_len=1,
        max_seq_len=context,
    )
    return {
        "query": torch.randn(batch, heads, head_dim, generator=gen),
        "k_cache": torch.randn(shape, generator=gen),
        "v_cache": torch.randn(shape, generator=gen),
        "meta": meta,
        "scale": head_dim**-0.5,
    }


def time_call(kernel: PagedAttention, inputs: dict[str, Any], calls: int) -> float:
    """Mean µs per call over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        kernel(inputs["query"], inputs["k_cache"], inputs["v_cache"], inputs["meta"], inputs["scale"])
    return (time.perf_counter() - start) / calls * 1e6


def compare(kernels: dict[str, PagedAttention], inputs: dict[str, Any], calls: int, rounds: int) -> dict[str, Any]:
    """The least mean per build over ``rounds`` alternating rounds, and the outputs' largest difference."""
    outputs = [
        k(inputs["query"], inputs["k_cache"], inputs["v_cache"], inputs["meta"], inputs["scale"])
        for k in kernels.values()
    ]
    best = dict.fromkeys(kernels, float("inf"))
    for _ in range(rounds):
        for name, kernel in kernels.items():
            best[name] = min(best[name], time_call(kernel, inputs, calls))
    native, portable = best["native"], best["portable"]
    return {
        "native_us": round(native, 1),
        "portable_us": round(portable, 1),
        "portable_over_native": round(portable / native, 2),
        "max_abs_difference": float((outputs[0] - outputs[1]).abs().max()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--contexts", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--portable-flags", default="-mno-avx512f -mno-avx2")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.batches, args.contexts, args.calls, args.rounds = [2], [40], 3, 1
    torch.set_num_threads(args.threads)
    kernels = {
        "native": load_paged_attention(),
        "portable": load_paged_attention((*NATIVE_FLAGS, *args.portable_flags.split())),
    }
    rows = []
    for batch in args.batches:
        for context in args.contexts:
            inputs = decode_batch(batch, context, args.heads, args.kv_heads, args.head_dim)
            rows.append({"batch": batch, "context": context, **compare(kernels, inputs, args.calls, args.rounds)})
    report = {
        "cpu": cpu_info().summary(),
        "threads": args.threads,
        "paths": {name: kernel.isa for name, kernel in kernels.items()},
        "shape": {"heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.head_dim, "dtype": "float32"},
        "rows": rows,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
