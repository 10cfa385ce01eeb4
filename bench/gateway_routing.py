"""Routing benchmark: round-robin vs least-load vs prefix-aware over 4 real engine replicas.

A shared-prefix workload from ``shoal bench serve``'s load generator (groups of requests repeating a long
system prompt, Poisson arrivals or a closed loop of ``--concurrency`` clients, groups interleaved at random)
goes through ``shoal gateway`` to 4 ``shoal serve`` replicas of a small random-weight Llama (big enough that a
long prefill costs real CPU time; built once into ``--model-dir``) or of ``--model`` (e.g. the bundled
``smollm2-135m``). Fresh engines for every policy, so no run inherits another's cache; ``--max-num-seqs`` and
``--max-num-batched-tokens`` set the engines' scheduler limits, which they announce to the gateway as their
capacity. Reported per policy: the prefix-cache hit rate read from the
engines' own counters, max/mean load across replicas (requests served and prompt tokens actually computed),
and TTFT p50/p95 from the load generator. The baseline is the same workload sent straight to ONE replica: the
hit rate a single cache would get.

    .venv/bin/python bench/gateway_routing.py --json /tmp/routing.json
    .venv/bin/python bench/gateway_routing.py --model smollm2-135m --groups 8 --requests 64 --concurrency 8 \
        --prefix-len 430 --output-len 32 --max-num-seqs 4 --max-num-batched-tokens 512
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from gateway_fleet import start_engines, start_gateway

from shoal.loadgen.datasets import shared_prefix_dataset
from shoal.loadgen.report import summarize
from shoal.loadgen.runner import BenchConfig, run_benchmark
from shoal.local import LocalProcess, metric
from shoal.protocol.prom_text import samples_named

SERVED = "bench"
POLICIES = ("round-robin", "least-load", "prefix-aware")


def build_model(directory: Path) -> Path:
    """A random Llama (hidden 256, 4 layers) with the engine tests' BPE tokenizer; reused when present."""
    if (directory / "config.json").exists():
        return directory
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "engine"))
    from tiny_checkpoints import build_checkpoint

    return build_checkpoint(
        directory,
        "llama",
        seed=11,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )


def engine_counters(engines: list[LocalProcess]) -> list[dict[str, float]]:
    names = (
        "prefix_cache_hits_tokens_total",
        "prefix_cache_queries_tokens_total",
        "prompt_tokens_total",
        "requests_finished_total",
    )
    return [{n: metric(e.url, f"shoal_engine_{n}") for n in names} for e in engines]


def run_load(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """``shoal bench serve``'s shared-prefix dataset (groups interleaved at random) under Poisson load."""
    requests = shared_prefix_dataset(
        args.requests, args.groups, args.prefix_len, args.suffix_len, args.output_len, args.seed
    )
    rate = math.inf if args.concurrency else args.rate
    config = BenchConfig(url, SERVED, args.concurrency, rate, seed=args.seed, progress=False)
    results, duration = asyncio.run(run_benchmark(config, requests))
    return summarize(results, duration)


def max_over_mean(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return max(values) / mean if mean else 0.0


def scenario(
    name: str, replicas: int, policy: str | None, model: str, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    logs = work / name
    logs.mkdir()
    limits = [
        a
        for flag, value in (
            ("--max-num-seqs", args.max_num_seqs),
            ("--max-num-batched-tokens", args.max_num_batched_tokens),
        )
        if value
        for a in (flag, str(value))
    ]
    engines = start_engines(
        model, replicas, SERVED, logs, "--num-kv-blocks", str(args.kv_blocks), "--max-model-len", "4096", *limits
    )
    gateway = None
    try:
        target = engines[0].url
        if policy is not None:
            gateway = start_gateway(
                [e.url for e in engines], logs, "--policy", policy, "--tokenizer", f"{SERVED}={model}"
            )
            target = gateway.url
        before = engine_counters(engines)
        result = run_load(target, args)
        after = engine_counters(engines)
        reasons = (
            {}
            if gateway is None
            else {
                labels["reason"]: int(value)
                for labels, value in samples_named(
                    httpx.get(gateway.url + "/metrics").text, "shoal_gateway_routing_decisions_total"
                )
            }
        )
    finally:
        for process in [*engines, *([gateway] if gateway else [])]:
            process.stop()
    delta = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before, strict=True)]
    hits = sum(d["prefix_cache_hits_tokens_total"] for d in delta)
    queries = sum(d["prefix_cache_queries_tokens_total"] for d in delta)
    return {
        "scenario": name,
        "replicas": replicas,
        "policy": policy,
        "hit_rate": hits / queries if queries else 0.0,
        "requests_max_over_mean": max_over_mean([d["requests_finished_total"] for d in delta]),
        "computed_prompt_tokens_max_over_mean": max_over_mean([d["prompt_tokens_total"] for d in delta]),
        "requests_per_replica": [int(d["requests_finished_total"]) for d in delta],
        "ttft_p50_ms": result["ttft"]["p50_ms"],
        "ttft_p95_ms": result["ttft"]["p95_ms"],
        "completed": result["completed"],
        "failed": result["failed"],
        "route_reasons": reasons,
    }


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so the finally blocks stop every child
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=192)
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second (Poisson)")
    parser.add_argument("--concurrency", type=int, help="a closed loop of this many clients instead of --rate")
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--prefix-len", type=int, default=300, help="words per shared system prompt")
    parser.add_argument("--suffix-len", type=int, default=12)
    parser.add_argument("--output-len", type=int, default=8)
    parser.add_argument("--kv-blocks", type=int, default=4096)
    parser.add_argument("--max-num-seqs", type=int, help="the engines' limit (default: the engine's own)")
    parser.add_argument("--max-num-batched-tokens", type=int, help="the engines' token budget per step")
    parser.add_argument("--model", help="a model name or path for the engines (default: the random Llama)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "shoal-bench-routing-model")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument(
        "--single-replica",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure the one-replica baseline (the hit rate a single cache gets)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    model = args.model or str(build_model(args.model_dir))
    rows = []
    with tempfile.TemporaryDirectory(prefix="gateway-routing-") as tmp:
        work = Path(tmp)
        if args.single_replica:
            rows.append(scenario("single-replica", 1, None, model, args, work))
        for policy in args.policies:
            rows.append(scenario(policy, 4, policy, model, args, work))
            print(json.dumps(rows[-1]), flush=True)
    baseline = rows[0]["hit_rate"] if args.single_replica else math.nan
    rr_p95 = next((r["ttft_p95_ms"] for r in rows if r["policy"] == "round-robin"), math.nan)
    print(
        f"\n{'scenario':<16}{'hit rate':>9}{'vs 1 replica':>13}{'req max/mean':>13}{'tok max/mean':>13}"
        f"{'TTFT p50':>10}{'TTFT p95':>10}{'p95 RR/x':>9}"
    )
    for r in rows:
        print(
            f"{r['scenario']:<16}{r['hit_rate']:>9.3f}{r['hit_rate'] / baseline if baseline else math.nan:>13.2f}"
            f"{r['requests_max_over_mean']:>13.2f}{r['computed_prompt_tokens_max_over_mean']:>13.2f}"
            f"{r['ttft_p50_ms']:>10.0f}{r['ttft_p95_ms']:>10.0f}{rr_p95 / r['ttft_p95_ms']:>9.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
