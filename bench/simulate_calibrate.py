"""Writes a simulator engine profile from a real engine: ``shoal serve`` measured by ``shoal bench serve``.

Starts one ``shoal serve`` (SmolLM2 by default) with a batch cap, then runs the load generator several times,
each time sending exactly ``concurrency`` requests of one shape at once, and records the seconds the engine
spent on each run: on the CPU (one torch thread) the CPU seconds its process used, idle CPU subtracted, which do
not depend on what else the shared machine runs; on a GPU (``--device cuda``, a machine of its own) the run's
wall seconds. :mod:`shoal.simulate.calibrate` fits the step-time model to those totals. The KV capacity is
read from the engine's ``shoal_engine_kv_cache_total_blocks``; the start-up is the engine's seconds until
``/ready`` on the same clock. Prints each run's measured and fitted seconds, and writes the profile JSON.

    .venv/bin/python bench/simulate_calibrate.py --out shoal/simulate/profiles/smollm2-135m-cpu.json
    python bench/simulate_calibrate.py --device cuda --model DIR --name NAME --out NAME.json \
        --max-num-seqs 256 --max-num-batched-tokens 8192 --kv-cache-bytes 16000000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from shoal.cpu_features import cpu_info
from shoal.local import LocalProcess, metric, shoal_command
from shoal.simulate.calibrate import observation, profile_from_bench

BLOCK_SIZE = 16
WARM_SEED = 1_000_000  # warm-up prompts are drawn apart from the measured runs' (seeds 0, 1, ...)
IDLE_S = 3.0
# (concurrency, prompt words, output tokens): prefill-heavy at several lengths, then decode at rising batch sizes;
# a GPU's runs reach vLLM's default batch (256 sequences) and prompts of thousands of tokens.
CPU_RUNS = (
    (1, 100, 24),
    (1, 300, 4),
    (1, 600, 4),
    (1, 1200, 4),
    (1, 1900, 4),
    (4, 100, 24),
    (4, 600, 16),
    (8, 200, 16),
    (16, 100, 24),
)
GPU_RUNS = (
    (1, 100, 32),
    (1, 1000, 4),
    (1, 3000, 4),
    (1, 6000, 4),
    (16, 100, 32),
    (32, 1000, 8),
    (64, 100, 32),
    (128, 200, 32),
    (256, 100, 32),
)


def run_once(
    server: LocalProcess,
    model: str,
    concurrency: int,
    words: int,
    output: int,
    out: Path,
    idle_rate: float | None,
    seed: int,
) -> dict:
    """One bench run; ``engine_s`` is its CPU seconds less ``idle_rate`` per second, or with None its wall seconds.

    Each run draws its prompts with a seed of its own, so that no run finds another's prompts in the prefix cache.
    """
    before, started = server.cpu_seconds(), time.perf_counter()
    subprocess.run(
        [
            *shoal_command("bench", "serve"),
            "--url",
            server.url,
            "--model",
            model,
            "--dataset",
            "random",
            "--num-requests",
            str(concurrency),
            "--concurrency",
            str(concurrency),
            "--input-len",
            str(words),
            "--output-len",
            str(output),
            "--seed",
            str(seed),
            "--no-progress",
            "--json",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    record = json.loads(out.read_text())
    if idle_rate is None:
        record["engine_s"] = record["summary"]["duration_s"]
    else:
        record["engine_s"] = server.cpu_seconds() - before - idle_rate * (time.perf_counter() - started)
    out.write_text(json.dumps(record))
    return record


def serve_options(device: str, kv_cache_bytes: int | None = None, attention_backend: str | None = None) -> list[str]:
    """``shoal serve``'s options besides the model and the batch caps: one torch thread on the CPU, as calibrated."""
    options = ["--device", device] + (["--threads", "1"] if device == "cpu" else [])
    if kv_cache_bytes is not None:
        options += ["--kv-cache-bytes", str(kv_cache_bytes)]
    if attention_backend is not None:
        options += ["--attention-backend", attention_backend]
    return options


def start_engine(model: str, max_num_seqs: int, budget: int, options: list[str], log: Path) -> LocalProcess:
    """``shoal serve`` of ``model`` with the batch caps and ``options`` (``serve_options``), not yet ready."""
    return LocalProcess(
        shoal_command(
            "serve",
            *("--model", model, *options),
            *("--max-num-seqs", str(max_num_seqs), "--max-num-batched-tokens", str(budget)),
        ),
        log,
    )


def measure(
    model: str,
    max_num_seqs: int,
    budget: int,
    out_dir: Path,
    device: str = "cpu",
    options: list[str] | None = None,
    runs: tuple[tuple[int, int, int], ...] = CPU_RUNS,
) -> tuple[list[dict], int, float]:
    """The runs' records, the KV capacity in tokens and the start-up: CPU seconds on the CPU, wall on a GPU."""
    options = serve_options(device) if options is None else options
    started = time.perf_counter()
    server = start_engine(model, max_num_seqs, budget, options, out_dir / "serve.log")
    try:
        server.wait_ready(timeout=900)
        startup = server.cpu_seconds() if device == "cpu" else time.perf_counter() - started
        kv_tokens = int(metric(server.url, "shoal_engine_kv_cache_total_blocks")) * BLOCK_SIZE
        run_once(server, model, 2, 50, 8, out_dir / "warmup.json", 0.0, seed=WARM_SEED - 1)
        idle_rate = None
        if device == "cuda":
            for i, (c, words, output) in enumerate(dict.fromkeys(runs)):  # Triton compiles per new batch shape
                warm = out_dir / f"warm-c{c}-p{words}-o{output}.json"
                run_once(server, model, c, words, output, warm, None, seed=WARM_SEED + i)
        else:
            before = server.cpu_seconds()
            time.sleep(IDLE_S)
            idle_rate = (server.cpu_seconds() - before) / IDLE_S
        records = [
            run_once(
                server, model, c, words, output, out_dir / f"{i:02d}-c{c}-p{words}-o{output}.json", idle_rate, seed=i
            )
            for i, (c, words, output) in enumerate(runs)
        ]
    finally:
        server.stop()
    return records, kv_tokens, startup


def _hardware(device: str) -> str:
    """The CPU (model, cores and vector flags), or the GPU's name, for the profile's source."""
    if device == "cuda":
        import torch

        return f"one {torch.cuda.get_device_name()}"
    return cpu_info().summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--kv-cache-bytes", type=int, default=None, help="the engine's default (512 MiB) if unset")
    parser.add_argument("--attention-backend", default=None, choices=("torch", "triton"))
    parser.add_argument(
        "--startup",
        type=float,
        nargs=2,
        default=None,
        metavar=("MIN_S", "MAX_S"),
        help="the profile's start-up range (a fleet's includes pulling and loading on a fresh node); default: the "
        "measured start-up, twice",
    )
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/shoal-calibrate"))
    parser.add_argument("--name", default="smollm2-135m-cpu")
    parser.add_argument("--describe", default="", help="what the model is, for the profile's source")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=1, help="measure every run this many times (new prompts each)")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    runs = (CPU_RUNS if args.device == "cpu" else GPU_RUNS) * args.repeats
    options = serve_options(args.device, args.kv_cache_bytes, args.attention_backend)
    records, kv_tokens, startup = measure(
        args.model, args.max_num_seqs, args.max_num_batched_tokens, args.out_dir, args.device, options, runs
    )
    clock = (
        "the engine's CPU seconds per run (the machine was shared)"
        if args.device == "cpu"
        else "each run's wall seconds (the GPU was this engine's alone)"
    )
    ready = f"{startup:.1f} {'CPU ' if args.device == 'cpu' else ''}s from starting shoal serve to /ready"
    if args.startup:
        startup_range = (args.startup[0], args.startup[1])
        startup_note = f"start-up {args.startup[0]:g}-{args.startup[1]:g} s as given (this engine was ready {ready})"
    else:
        startup_range = (round(startup, 1), round(startup, 1))
        startup_note = f"start-up as measured, {ready}"
    repeats = (
        f", each of the {len(runs) // args.repeats} runs measured {args.repeats} times" if args.repeats > 1 else ""
    )
    source = (
        f"Measured by bench/simulate_calibrate.py on {time.strftime('%Y-%m-%d')}: shoal serve --model "
        f"{args.model} {' '.join(options)} --max-num-seqs {args.max_num_seqs} --max-num-batched-tokens "
        f"{args.max_num_batched_tokens}, {_hardware(args.device)}{args.describe}; step times fitted to "
        f"{clock}{repeats}; {startup_note}."
    )
    profile = profile_from_bench(
        records,
        args.name,
        source,
        args.max_num_batched_tokens,
        args.max_num_seqs,
        kv_tokens,
        startup_range,
    )
    print(f"{'run':<22}{'steps':>7}{'prefill':>9}{'seq-steps':>10}{'measured s':>12}{'fitted s':>10}")
    for record, (c, words, output) in zip(records, runs, strict=True):
        features, seconds = observation(record, args.max_num_batched_tokens)
        steps, prefill, seq_steps, context, pairs = features
        step = profile.step
        fitted = (
            step.base_s * steps
            + step.per_prefill_token_s * prefill
            + step.per_decode_seq_s * seq_steps
            + step.per_context_token_s * context
            + step.per_prefill_attention_s * pairs
        )
        print(
            f"{f'c={c} p={words} o={output}':<22}{steps:>7.0f}{prefill:>9.0f}{seq_steps:>10.0f}{seconds:>12.2f}"
            f"{fitted:>10.2f}"
        )
    args.out.write_text(profile.to_json())
    print(f"wrote {args.out}: {profile.step}; KV {kv_tokens} tokens; start-up {startup:.1f} s")


if __name__ == "__main__":
    main()
