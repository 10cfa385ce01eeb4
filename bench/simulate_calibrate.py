"""Writes a simulator engine profile from a real engine: ``shoal serve`` measured by ``shoal bench serve``.

Starts one ``shoal serve`` (SmolLM2 by default, one torch thread) with a batch cap, then runs the load
generator several times, each time sending exactly ``concurrency`` requests of one shape at once, and records
the CPU seconds the engine process used during each run (idle CPU subtracted). :mod:`shoal.simulate.calibrate`
fits the step-time model to those totals; CPU time, unlike wall time, does not depend on what else the shared
machine runs. The KV capacity is read from the engine's ``shoal_engine_kv_cache_total_blocks``; the start-up
is the engine's CPU seconds until ``/ready`` (loading is CPU-bound here). Prints each run's measured and fitted
CPU seconds, and writes the profile JSON.

    .venv/bin/python bench/simulate_calibrate.py --out shoal/simulate/profiles/smollm2-135m-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

from shoal.local import LocalProcess, metric, shoal_command
from shoal.simulate.calibrate import observation, profile_from_bench

BLOCK_SIZE = 16
IDLE_S = 3.0
# (concurrency, prompt words, output tokens): prefill-heavy at three lengths, then decode at rising batch sizes.
RUNS = (
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


def run_once(
    server: LocalProcess, model: str, concurrency: int, words: int, output: int, out: Path, idle_rate: float
) -> dict:
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
            str(words),
            "--no-progress",
            "--json",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    record = json.loads(out.read_text())
    record["engine_cpu_s"] = server.cpu_seconds() - before - idle_rate * (time.perf_counter() - started)
    out.write_text(json.dumps(record))
    return record


def measure(model: str, max_num_seqs: int, budget: int, out_dir: Path) -> tuple[list[dict], int, float]:
    server = LocalProcess(
        shoal_command(
            "serve",
            "--model",
            model,
            "--threads",
            "1",
            "--max-num-seqs",
            str(max_num_seqs),
            "--max-num-batched-tokens",
            str(budget),
        ),
        out_dir / "serve.log",
    )
    try:
        server.wait_ready(timeout=900)
        startup = server.cpu_seconds()
        kv_tokens = int(metric(server.url, "shoal_engine_kv_cache_total_blocks")) * BLOCK_SIZE
        run_once(server, model, 2, 50, 8, out_dir / "warmup.json", 0.0)
        before = server.cpu_seconds()
        time.sleep(IDLE_S)
        idle_rate = (server.cpu_seconds() - before) / IDLE_S
        records = [
            run_once(server, model, c, words, output, out_dir / f"c{c}-p{words}-o{output}.json", idle_rate)
            for c, words, output in RUNS
        ]
    finally:
        server.stop()
    return records, kv_tokens, startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/shoal-calibrate"))
    parser.add_argument("--name", default="smollm2-135m-cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    records, kv_tokens, startup = measure(args.model, args.max_num_seqs, args.max_num_batched_tokens, args.out_dir)
    flags = set(Path("/proc/cpuinfo").read_text().split())
    cpu = ", ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags) or "no avx2"
    source = (
        f"Measured here by bench/simulate_calibrate.py on {time.strftime('%Y-%m-%d')}: shoal serve --model "
        f"{args.model} --threads 1 --max-num-seqs {args.max_num_seqs} --max-num-batched-tokens "
        f"{args.max_num_batched_tokens}, {os.cpu_count()} cores ({cpu}); step times fitted to the engine's CPU "
        "seconds per run (the machine was shared); start-up is the engine's CPU seconds to /ready."
    )
    profile = profile_from_bench(
        records,
        args.name,
        source,
        args.max_num_batched_tokens,
        args.max_num_seqs,
        kv_tokens,
        (round(startup, 1), round(startup, 1)),
    )
    print(f"{'run':<22}{'steps':>7}{'prefill':>9}{'seq-steps':>10}{'measured s':>12}{'fitted s':>10}")
    for record, (c, words, output) in zip(records, RUNS, strict=True):
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
    print(f"wrote {args.out}: {profile.step}; KV {kv_tokens} tokens; start-up {startup:.1f} CPU s")


if __name__ == "__main__":
    main()
