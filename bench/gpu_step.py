"""The GPU session's one prepared run: the engine's step against the card's limits, as JSON (issue 28's figures).

Measures, each against a baseline taken in the same run on the same card:

- the card's copy bandwidth: a device-to-device copy of a large tensor, bytes read plus bytes written per second;
- the batch-1 decode step of a Llama-3-8B-shaped bf16 model with random weights (``bench/shaped_checkpoint.py``)
  on the offline engine (``bench/decode_step.py``'s loop), against the time to read its weights once at that
  bandwidth (the floor; target at most 1.4x);
- the decode step replaying the engine's CUDA graphs against the same engine with its graphs set aside (eager), at
  batch 1 and 64 (on a CPU there are no graphs: the eager time alone);
- output tokens/s with 1, 64 and 256 sequences in flight (offline engine, ``ignore_eos``);
- mixed steps, which dominate under load: D sequences decoding beside a C-token prompt's prefill in one step,
  against the two as steps apart (``bench/decode_step.py``'s ``time_mixed_steps``);
- prefill attention against SDPA's flash attention (target 0.7x its TFLOP/s) and decode attention, 1 x 8,192
  tokens, against the copy bandwidth (target 50%), through ``bench/kernel_timing.py``'s measurements;
- the engine's start-up: the wall time of building it, and the start-up lines it logs, where it logs any.

Sized for well under 10 minutes on an H100, not yet run on one (the checkpoint's 16 GB are written to
``--work-dir`` first, unless ``--model`` names one). In the GPU session, from the checkout's root (no make;
``$OUT`` is where the JSON goes)::

    PYTHONPATH=$PWD python3 bench/gpu_step.py --out $OUT/gpu_step.json

The tokenizer is rebuilt from the bundled SmolLM2 GGUF; where that package is missing (the GPU machine's image),
make it here first, carry it, and name it: ``python bench/shaped_checkpoint.py tokenizer --out .gpu/tokenizer``,
then ``--tokenizer .gpu/tokenizer``.

``--device cpu --smoke`` runs the same code on a tiny model and tiny shapes in seconds (Triton interpreted): it
checks the script, its figures mean nothing. It exits 1 (after writing the JSON) if an attention kernel's output
is off the torch reference's by more than bench/kernel_timing.py's tolerance.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
TARGETS = {"decode_step_vs_floor": 1.4, "prefill_vs_sdpa": 0.7, "decode_attention_vs_copy": 0.5}
CONCURRENCY = (1, 64, 256)
GRAPH_BATCHES = (1, 64)


@dataclass(frozen=True)
class Plan:
    """What one run measures: the model's shape and the sizes of every measurement."""

    shape: str
    copy_bytes: int
    prompt_len: int
    output_len: int
    decode_steps: int
    decode_context: int
    repeats: int
    mixed: tuple[tuple[int, int], ...]  # (sequences decoding, prompt tokens prefilled beside them)


FULL = Plan(
    "llama3-8b", 2 << 30, 128, 128, 64, decode_context=8192, repeats=20, mixed=((16, 512), (64, 512), (64, 2048))
)
SMOKE = Plan("tiny-llama", 16 << 20, 8, 4, 4, decode_context=80, repeats=2, mixed=((4, 16),))


def copy_bandwidth(nbytes: int, device: str, repeats: int) -> float:
    """Bytes per second a device-to-device copy moves (each byte read once and written once)."""
    import torch
    from kernel_timing import timed

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = timed(lambda: dst.copy_(src), device, repeats)
    return 2 * nbytes / seconds


def weights_read_bytes(model: Any) -> int:
    """Bytes a decode step reads from the weights: every parameter once, except the embedding table (one row per
    token) unless the LM head reads it too (tied). A projection oneDNN packed (on a CPU) reads its packed copy, of
    the same size, not its weight: a tied head's weight is then the embedding's, read by the gather alone."""
    from shoal.engine.model.packed_linear import PackedLinear

    seen: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        owner, _, attribute = name.rpartition(".")
        if attribute == "weight" and isinstance(model.get_submodule(owner), PackedLinear):
            continue
        seen.setdefault(param.data_ptr(), []).append(name)
        sizes[param.data_ptr()] = param.numel() * param.element_size()
    untied_embedding = {ptr for ptr, names in seen.items() if all("embed_tokens" in n for n in names)}
    packed = sum(m.packed.numel() * m.packed.element_size() for m in model.modules() if isinstance(m, PackedLinear))
    return packed + sum(size for ptr, size in sizes.items() if ptr not in untied_embedding)


def write_checkpoint(plan: Plan, work_dir: Path, tokenizer: Path | None) -> Path:
    """The shape's random bf16 checkpoint, with SmolLM2's tokenizer (rebuilt from the bundled GGUF unless given)."""
    import shaped_checkpoint

    if tokenizer is None:
        tokenizer = work_dir / "tokenizer"
        shaped_checkpoint.write_tokenizer(tokenizer)
    model = work_dir / plan.shape
    shaped_checkpoint.write_weights(plan.shape, tokenizer, model, seed=0)
    return model


class StartupLines(logging.Handler):
    """Collects what the engine logs about its start-up (its phases' times, where it reports them)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if re.search(r"start-?up", message, re.IGNORECASE):
            self.lines.append(message)


def start_engine(model: Path, device: str, dtype: str, plan: Plan) -> tuple[Any, dict[str, Any]]:
    """The offline engine, sized for ``CONCURRENCY[-1]`` sequences of the plan's prompts and outputs."""
    from shoal.engine import LLM

    block_size = 16
    per_request = plan.prompt_len + 2 * max(plan.output_len, plan.decode_steps) + 2 * block_size
    longest_prompt = max(chunk for _, chunk in plan.mixed) + block_size  # a mixed step's prompt, beside decodes
    max_model_len = max(per_request, longest_prompt)
    tokens = CONCURRENCY[-1] * per_request + longest_prompt
    handler = StartupLines()
    shoal_log = logging.getLogger("shoal")
    level = shoal_log.level
    shoal_log.addHandler(handler)
    shoal_log.setLevel(logging.INFO)
    began = time.perf_counter()
    try:
        llm = LLM(
            str(model),
            device=device,
            dtype=dtype,
            block_size=block_size,
            num_kv_blocks=math.ceil(tokens / block_size),
            max_num_seqs=CONCURRENCY[-1],
            max_model_len=max_model_len,
            max_num_batched_tokens=max([2048, *(decodes + chunk for decodes, chunk in plan.mixed)]),
        )
    finally:
        shoal_log.removeHandler(handler)
        shoal_log.setLevel(level)
    startup: dict[str, Any] = {"total_s": round(time.perf_counter() - began, 2)}
    if handler.lines:
        startup["engine_lines"] = handler.lines
    return llm, startup


def decode_step(llm: Any, plan: Plan, bandwidth: float) -> dict[str, Any]:
    """Batch-1 decode step against the weights' read time at ``bandwidth``."""
    from decode_step import time_decode_steps

    _, wall = time_decode_steps(llm.engine, 1, plan.prompt_len, plan.decode_steps)
    step = wall / plan.decode_steps
    read = weights_read_bytes(llm.engine.runner.model)
    floor = read / bandwidth
    return {
        "batch": 1,
        "step_ms": round(step * 1e3, 3),
        "weights_read_bytes": read,
        "floor_ms": round(floor * 1e3, 3),
        "vs_floor": round(step / floor, 2),
        "target_vs_floor": TARGETS["decode_step_vs_floor"],
    }


def graphs_vs_eager(llm: Any, plan: Plan) -> dict[str, Any]:
    """The decode step's wall time replaying CUDA graphs and eagerly, on the same engine (its graphs set aside)."""
    from decode_step import time_decode_steps

    runner = llm.engine.runner
    graphs = runner.graphs
    rows = []
    for batch in GRAPH_BATCHES:
        row: dict[str, Any] = {"batch": batch}
        if graphs is not None:
            _, wall = time_decode_steps(llm.engine, batch, plan.prompt_len, plan.decode_steps)
            row["graph_step_ms"] = round(wall / plan.decode_steps * 1e3, 3)
        runner.graphs = None
        try:
            _, wall = time_decode_steps(llm.engine, batch, plan.prompt_len, plan.decode_steps)
        finally:
            runner.graphs = graphs
        row["eager_step_ms"] = round(wall / plan.decode_steps * 1e3, 3)
        if graphs is not None:
            row["eager_vs_graph"] = round(row["eager_step_ms"] / row["graph_step_ms"], 2)
        rows.append(row)
    return {"captured": list(graphs.sizes) if graphs is not None else None, "steps": rows}


def mixed_steps(llm: Any, plan: Plan) -> list[dict[str, Any]]:
    """Each of the plan's mixed shapes: the decodes' step, the prompt's step and the two as one, wall ms."""
    from decode_step import time_mixed_steps

    return [time_mixed_steps(llm.engine, d, c, plan.prompt_len, plan.repeats) for d, c in plan.mixed]


def throughput(llm: Any, plan: Plan) -> list[dict[str, Any]]:
    """Output tokens/s with each of ``CONCURRENCY`` sequences in flight (distinct prompts, no shared prefix)."""
    from shoal.engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=plan.output_len, ignore_eos=True)
    llm.generate([[7, *range(200, 199 + plan.prompt_len)]], params)  # warm-up: every kernel compiled once
    rows = []
    for n in CONCURRENCY:
        prompts = [[100 + i, *range(200, 199 + plan.prompt_len)] for i in range(n)]
        began = time.perf_counter()
        outputs = llm.generate(prompts, params)
        seconds = time.perf_counter() - began
        generated = sum(len(o.token_ids) for o in outputs)
        rows.append({"concurrent": n, "output_tokens": generated, "seconds": round(seconds, 3)})
        rows[-1]["output_tokens_per_s"] = round(generated / seconds, 1)
    return rows


def attention(plan: Plan, device: str, dtype: Any, bandwidth: float, smoke: bool) -> dict[str, Any]:
    """Prefill attention vs SDPA on bench/kernel_timing.py's shapes, decode attention 1 x ``decode_context`` vs copy."""
    import kernel_timing as kernels

    shapes = kernels.SMOKE if smoke else kernels.FULL
    prefill = []
    for num_seqs, length in shapes.prefill:
        f = kernels.measure_prefill(shapes, num_seqs, length, dtype, device, plan.repeats)
        prefill.append(
            {
                "seqs": num_seqs,
                "prompt": length,
                "max_err": f.max_err,
                "tflops": round(f.flops / f.seconds / 1e12, 3),
                "sdpa_tflops": round(f.flops / f.sdpa_seconds / 1e12, 3),
                "vs_sdpa": round(f.sdpa_seconds / f.seconds, 3),
            }
        )
    d = kernels.measure_decode(shapes, 1, plan.decode_context, dtype, device, plan.repeats)
    decode = {
        "seqs": 1,
        "context": plan.decode_context,
        "max_err": d.max_err,
        "us": round(d.seconds * 1e6, 1),
        "gbps": round(d.gbps, 1),
        "vs_copy_bandwidth": round(d.gbps * 1e9 / bandwidth, 3),
        "vs_same_size_copy": round(d.copy_seconds / d.seconds, 3),
        "target_vs_copy": TARGETS["decode_attention_vs_copy"],
    }
    tolerance = kernels.TOLERANCE[str(dtype).removeprefix("torch.")]
    return {
        # the compiled kernels against the torch reference on the same batches: a wrong kernel fails the run
        "correct": all(row["max_err"] <= tolerance for row in [*prefill, decode]),
        "tolerance": tolerance,
        "prefill": prefill,
        "prefill_target_vs_sdpa": TARGETS["prefill_vs_sdpa"],
        "decode": decode,
        "heads": [shapes.num_heads, shapes.num_kv_heads, shapes.head_dim],
    }


def commit() -> str | None:
    """The checkout's commit, where it is a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=BENCH, check=False)
    except OSError:
        return None
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_out = Path(os.environ["OUT"]) / "gpu_step.json" if os.environ.get("OUT") else None
    parser.add_argument("--out", type=Path, default=default_out, help="the JSON file (default $OUT/gpu_step.json)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--smoke", action="store_true", help="a tiny model and shapes: checks the script only")
    parser.add_argument("--model", type=Path, help="an existing checkpoint of the shape (else one is written)")
    parser.add_argument("--tokenizer", type=Path, help="shaped_checkpoint.py's tokenizer directory, if made already")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/shoal-gpu-step"), help="where it is written")
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("--out is required when $OUT is not set")
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel is imported: Triton on the CPU is interpreted
    sys.path.insert(0, str(BENCH))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu_step.py: --device cuda, but torch sees no CUDA GPU (--device cpu --smoke checks the script)")
        return 2
    plan = SMOKE if args.smoke else FULL
    dtype = "bfloat16" if args.device == "cuda" else "float32"  # the interpreter's bf16 dots are not exact
    torch.manual_seed(0)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu (Triton interpreter)",
        "smoke": args.smoke,
        "commit": commit(),
        "torch": torch.__version__,
        "shape": plan.shape,
        "dtype": dtype,
    }
    bandwidth = copy_bandwidth(plan.copy_bytes, args.device, plan.repeats)
    report["copy_bandwidth_gbps"] = round(bandwidth / 1e9, 1)
    report["attention"] = attention(plan, args.device, getattr(torch, dtype), bandwidth, args.smoke)
    model = args.model or write_checkpoint(plan, args.work_dir, args.tokenizer)
    llm, report["startup"] = start_engine(model, args.device, dtype, plan)
    report["decode_step"] = decode_step(llm, plan, bandwidth)
    report["graphs_vs_eager"] = graphs_vs_eager(llm, plan)
    report["throughput"] = throughput(llm, plan)
    report["mixed_steps"] = mixed_steps(llm, plan)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if report["attention"]["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
