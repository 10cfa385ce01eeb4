"""CPU time of one decode step at batch 1 (SmolLM2 by default), and where it goes: the single-stream cost.

Builds the offline engine, prefills one request, then times ``--steps`` engine steps that each decode one
token, in CPU seconds of this process (``time.process_time``: the work done, not the neighbours' load on a
shared machine) and wall seconds. ``--profile`` adds torch.profiler's table of the ops with the most CPU time
and the share of the step spent outside matrix multiplications (the C kernel's calls show as ``shoal::q4_1`` and
``shoal::q8_0``). ``--kernel torch`` serves the int4 projections on torch's kernel instead of shoal's C kernel
(``SHOAL_CPU_KERNEL=torch``), for a before/after in one run.

    .venv/bin/python bench/decode_step.py [--dtype auto] [--quantization auto] [--threads 1] [--kernel auto|torch]
        [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from shoal.cpu_features import cpu_info
from shoal.engine.model.quantized_linear import QuantizedLinear

MATMUL_OPS = (
    "aten::addmm",
    "aten::mm",
    "aten::bmm",
    "aten::_weight_int4pack_mm_for_cpu",
    "aten::_weight_int8pack_mm",
    "shoal::q4_1",
    "shoal::q8_0",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--kernel", choices=("auto", "torch"), default="auto", help="the int4 projections' kernel")
    parser.add_argument("--profile", action="store_true", help="also print torch.profiler's top ops")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["SHOAL_CPU_KERNEL"] = args.kernel

    from shoal.engine import LLM, SamplingParams

    llm = LLM(args.model, dtype=args.dtype, quantization=args.quantization)
    engine = llm.engine
    prompt = list(range(100, 100 + args.prompt_len))
    engine.add_request("r", prompt, SamplingParams(temperature=0.0, max_tokens=args.steps * 2 + 20, ignore_eos=True))
    for _ in range(10):  # prefill and warm-up decodes
        engine.step()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        engine.step()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    report = {
        "cpu": cpu_info().summary(),
        "torch": f"{torch.__version__}, {args.threads} threads",
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "dtype": str(engine.dtype).removeprefix("torch."),
        "quantization": engine.quantization,
        "kernels": sorted({m.kind for m in engine.runner.model.modules() if isinstance(m, QuantizedLinear)}),
        "cpu_ms_per_step": round(cpu / args.steps * 1e3, 2),
        "wall_ms_per_step": round(wall / args.steps * 1e3, 2),
    }
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        _label_c_kernel_calls()

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                engine.step()
        averages = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in averages)
        matmul = sum(e.self_cpu_time_total for e in averages if e.key in MATMUL_OPS)
        print(averages.table(sort_by="self_cpu_time_total", row_limit=20))
        report["profiled_cpu_ms_per_step"] = round(total / args.steps / 1e3, 2)
        report["profiled_matmul_ms_per_step"] = round(matmul / args.steps / 1e3, 2)
        report["profiled_matmul_share"] = round(matmul / total, 3) if total else None
    print(json.dumps(report, indent=2))


def _label_c_kernel_calls() -> None:
    """The C kernel is a ctypes call, not a torch op: a ``record_function`` around it makes the profiler count it."""
    from shoal.kernels.cpu import QuantGemv

    call = QuantGemv._call

    def labelled(self: QuantGemv, kind: int, name: str, *args: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function(f"shoal::{name}"):
            return call(self, kind, name, *args)

    QuantGemv._call = labelled  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
