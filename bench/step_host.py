"""Host time of an engine step outside the model's forward pass, per step and per decoding sequence.

Builds the offline engine (``shoal.engine.LLM``, device cpu, one torch thread) on a tiny random-weight Llama
(written by ``tests/engine/tiny_checkpoints.py`` unless ``--model`` names one), and for each batch size admits that
many requests with distinct prompts, prefills them, and times ``--steps`` steps in which every request decodes one
token, all in torch's inference mode held around the loop, as ``LLM.generate`` and the server's step thread hold it
(``EngineCore.stepping``). The model's ``forward`` is wrapped with a timer: what a step costs beyond it is the
host's work (scheduling, block bookkeeping, step metadata, sampling, detokenizing, stop checks), which on a GPU is
time the device waits. Times are wall seconds and the process's CPU seconds (``time.process_time``: the work done,
less the neighbours' load on a shared machine), the median step (the mean beside it for wall time). One decode step
is also counted in aten ops that compute or move data (a ``TorchDispatchMode``; views left out): in all, outside the
forward, and the copies of host data into tensors among those (each a host-to-device copy on a GPU). ``--rounds N``
measures N engines per batch size and keeps the one with the least host CPU time (the quietest moment on a shared
machine). JSON on stdout.

    .venv/bin/python bench/step_host.py [--batches 1 64 256] [--steps 64] [--prompt-len 16] [--rounds 3] [--profile]
    .venv/bin/python bench/step_host.py --smoke   # batches 1 and 4, 4 steps: checks that it runs
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "engine")]

from shoal.cpu_features import cpu_info  # noqa: E402


class _ForwardTimer:
    """Wraps a model's ``forward``: wall and CPU seconds spent inside it since the last ``reset``."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.inside = False
        forward = model.forward

        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            self.inside = True
            try:
                return forward(*args, **kwargs)
            finally:
                self.inside = False
                self.wall += time.perf_counter() - wall
                self.cpu += time.process_time() - cpu

        model.forward = timed  # type: ignore[method-assign]

    def reset(self) -> None:
        self.wall = self.cpu = 0.0


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops that compute or move data (views left out), in all and outside the timed forward, and
    among those outside it the ones that bring host data into a tensor (a copy, a cast, a list made a tensor):
    on a GPU each of those is a host-to-device copy."""

    def __init__(self, timer: _ForwardTimer) -> None:
        super().__init__()
        self.timer = timer
        self.total = 0
        self.outside = 0
        self.copies = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        copy = name in ("copy_", "_to_copy", "lift_fresh")
        if copy or not func.is_view:
            self.total += 1
            self.outside += not self.timer.inside
            self.copies += copy and not self.timer.inside
        return func(*args, **(kwargs or {}))


def _run_steps(
    engine: Any, timer: _ForwardTimer, batch: int, steps: int, profiler: cProfile.Profile | None
) -> tuple[list[float], list[float], list[float], list[float], _OpCounter]:
    """Prefills, warms up, counts one decode step's ops, then times ``steps`` decode steps: wall and CPU seconds
    of each step and of its forward."""
    while engine.scheduler.waiting or any(r.num_output_tokens == 0 for r in engine.scheduler.running):
        engine.step()  # prefills
    for _ in range(3):  # warm-up decodes
        engine.step()
    counter = _OpCounter(timer)
    with counter:
        engine.step()
    walls, cpus, forwards, forward_cpus = [], [], [], []
    for _ in range(steps):
        assert engine.scheduler.num_running == batch, "every request decodes in every timed step"
        timer.reset()
        if profiler is not None:
            profiler.enable()
        wall, cpu = time.perf_counter(), time.process_time()
        engine.step()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        if profiler is not None:
            profiler.disable()
        forwards.append(timer.wall)
        forward_cpus.append(timer.cpu)
    return walls, cpus, forwards, forward_cpus, counter


def measure(model: str, batch: int, steps: int, prompt_len: int, profile: bool) -> dict[str, Any]:
    """One engine with ``batch`` decoding requests: host time per step outside the forward, and per sequence."""
    from shoal.engine import LLM, SamplingParams

    block_size = 16
    per_request = -(-(prompt_len + steps + 16) // block_size)
    llm = LLM(
        model,
        device="cpu",
        dtype="float32",
        max_num_seqs=batch,
        max_num_batched_tokens=max(2048, batch * prompt_len),
        num_kv_blocks=batch * per_request + 1024 // block_size,  # max_model_len stays the model's 1,024
        block_size=block_size,
    )
    engine = llm.engine
    vocab = engine.model_config.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=steps + 16, ignore_eos=True)
    for i in range(batch):  # distinct prompts: no request shares a block with another
        engine.add_request(f"r{i}", [(i * 7 + j * 13 + 1) % vocab for j in range(prompt_len)], params)
    profiler = cProfile.Profile() if profile else None
    timer = _ForwardTimer(engine.runner.model)  # type: ignore[attr-defined]
    with engine.stepping():  # inference mode held around the loop, as LLM.generate and the server's step thread do
        walls, cpus, forwards, forward_cpus, counter = _run_steps(engine, timer, batch, steps, profiler)
    host = [w - f for w, f in zip(walls, forwards, strict=True)]
    host_cpu = [c - f for c, f in zip(cpus, forward_cpus, strict=True)]
    result: dict[str, Any] = {
        "batch": batch,
        "steps": steps,
        "step_ms": round(statistics.median(walls) * 1e3, 3),
        "forward_ms": round(statistics.median(forwards) * 1e3, 3),
        "host_us_per_step": round(statistics.median(host) * 1e6, 1),
        "host_us_per_step_mean": round(statistics.fmean(host) * 1e6, 1),
        "host_cpu_us_per_step": round(statistics.median(host_cpu) * 1e6, 1),
        "host_us_per_seq": round(statistics.median(host) * 1e6 / batch, 2),
        "host_cpu_us_per_seq": round(statistics.median(host_cpu) * 1e6 / batch, 2),
        "aten_ops_per_step": counter.total,
        "aten_ops_outside_forward": counter.outside,
        "host_copies_outside_forward": counter.copies,
    }
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        print(f"\n--- batch {batch}: cProfile over {steps} steps (forward included) ---", file=sys.stderr)
        stats.sort_stats("tottime").print_stats(25)
    return result


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a checkpoint directory (default: a tiny random Llama written here)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--steps", type=int, default=64, help="timed decode steps per batch size")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the forward's time is the thread's)")
    parser.add_argument("--rounds", type=int, default=1, help="engines measured per batch size; the best is kept")
    parser.add_argument("--profile", action="store_true", help="cProfile's top functions per batch, on stderr")
    parser.add_argument("--smoke", action="store_true", help="batches 1 and 4, 4 steps: that it runs, not a figure")
    args = parser.parse_args(argv)
    if args.smoke:
        args.batches, args.steps = [1, 4], 4
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from tiny_checkpoints import build_checkpoint

            model = str(build_checkpoint(Path(tmp) / "tiny-llama", "llama", seed=1, max_position_embeddings=1024))
        results = [
            min(
                (measure(model, b, args.steps, args.prompt_len, args.profile) for _ in range(args.rounds)),
                key=lambda r: r["host_cpu_us_per_step"],
            )
            for b in args.batches
        ]
    report = {
        "cpu": cpu_info().summary(),
        "torch": f"{torch.__version__}, {args.threads} threads",
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "commit": _commit(),
        "model": args.model or "tiny random Llama (hidden 64, 2 layers, vocab 384)",
        "prompt_len": args.prompt_len,
        "rounds": args.rounds,
        "results": results,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
