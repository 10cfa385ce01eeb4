"""shoal's C kernel against torch's int4 kernel and the bf16 matmul on SmolLM2's projection shapes, µs per call.

One matrix called in a loop (warm caches: the kernels' compute, not a decode step's memory traffic; for that,
``bench/decode_step.py --kernel auto|torch``). One torch thread unless ``--threads``; each figure is the median
of ``--rounds`` timings, and the line carries the CPU flags and the load average.

    .venv/bin/python bench/quant_gemv.py [--threads 1] [--rounds 3] [--against OLD.c]

``--against`` also builds another version of ``quant_gemv.c`` (``git show REV:shoal/kernels/cpu/quant_gemv.c``)
with the same flags and times it beside this tree's on the same inputs (``against_q4_1`` / ``against_q8_0``),
reporting whether the two builds' outputs are equal to the bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from shoal.cpu_features import cpu_info
from shoal.engine.loader.quantize import int4_from_dense, pack_int4
from shoal.kernels.cpu import QuantGemv, load_quant_gemv, q4_1_layout, q8_0_layout
from shoal.kernels.cpu.library import load_library

SHAPES = {
    "qkv 576->960": (960, 576),
    "gate_up 576->3072": (3072, 576),
    "down 1536->576": (576, 1536),
    "LM head 576->49152": (49152, 576),
}


def per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return round(statistics.median(times), 1)


def shape_times(
    kernel: QuantGemv, out: int, cols: int, rounds: int, against: QuantGemv | None = None
) -> dict[int, dict[str, float | bool]]:
    """µs per call of each kernel at 1, 4 and 8 rows for one ``[out, cols]`` weight; with ``against``, that
    build's too and whether its outputs equal this tree's."""
    generator = torch.Generator().manual_seed(out + cols)
    dense = (torch.randn(out, cols, generator=generator) * 0.05).bfloat16()
    codes = int4_from_dense(dense)
    c_packed = q4_1_layout(codes.codes, codes.scales, codes.lows)
    torch_codes, torch_scales = pack_int4(codes, torch.bfloat16)
    int8 = torch.randint(-127, 128, (out, cols), dtype=torch.int8, generator=generator)
    q8_packed = q8_0_layout(int8, torch.rand(out, cols // 32, generator=generator))
    calls = 20 if out > 10_000 else 300
    times: dict[int, dict[str, float | bool]] = {}
    for rows in (1, 4, 8):
        x = torch.randn(rows, cols, generator=generator).bfloat16()
        kernels: dict[str, Callable[[], object]] = {
            "c_q4_1": partial(kernel.q4_1, x, *c_packed),
            "torch_int4": partial(torch.ops.aten._weight_int4pack_mm_for_cpu, x, torch_codes, 32, torch_scales),
            "c_q8_0": partial(kernel.q8_0, x, *q8_packed),
            "bf16": partial(torch.nn.functional.linear, x, dense),
        }
        if against is not None:
            kernels["against_q4_1"] = partial(against.q4_1, x, *c_packed)
            kernels["against_q8_0"] = partial(against.q8_0, x, *q8_packed)
        times[rows] = {name: per_call_us(fn, calls, rounds) for name, fn in kernels.items()}
        if against is not None:
            times[rows]["equal_to_against"] = torch.equal(kernel.q4_1(x, *c_packed), against.q4_1(x, *c_packed)) and (
                torch.equal(kernel.q8_0(x, *q8_packed), against.q8_0(x, *q8_packed))
            )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another quant_gemv.c to time beside this tree's")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernel = load_quant_gemv()
    against = QuantGemv(load_library(args.against)) if args.against else None
    results = {name: shape_times(kernel, *shape, args.rounds, against) for name, shape in SHAPES.items()}
    report = {
        "cpu": cpu_info().summary(),
        "vnni": sorted(f for f in cpu_info().flags if "vnni" in f),
        "kernel_isa": kernel.isa,
        "torch": f"{torch.__version__}, {args.threads} threads",
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "us_per_call": results,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
