"""``shoal bench serve``: load a running OpenAI-compatible server and report latency and throughput."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from shoal.loadgen.client import COMPLETIONS, ENDPOINTS


def _slos(items: list[str] | None) -> dict[str, float]:
    from shoal.loadgen.report import SLO_METRICS

    slos: dict[str, float] = {}
    for item in items or []:
        name, _, value = item.partition(":")
        if name not in SLO_METRICS or not value:
            raise argparse.ArgumentTypeError(
                f"--goodput takes NAME:MS with NAME in {', '.join(SLO_METRICS)}; got {item!r}"
            )
        slos[name] = float(value)
    return slos


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="Benchmarks.")
    kinds = bench.add_subparsers(dest="bench_command", metavar="KIND", required=True)
    p = kinds.add_parser("serve", help="Load a running server with streamed completions and report latency.")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True)
    p.add_argument(
        "--endpoint",
        choices=ENDPOINTS,
        default=COMPLETIONS,
        help="the API path loaded, as vLLM's bench names it: prompts as they are, or each as one user message",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="sent as `Authorization: Bearer KEY` (a Shoal gateway on a cluster has auth on; default: "
        "$OPENAI_API_KEY, as the openai client reads it); never written to --json",
    )
    p.add_argument("--dataset", choices=("random", "shared-prefix"), default="random")
    p.add_argument("--num-requests", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=None, help="most requests in flight (default: no cap)")
    p.add_argument("--request-rate", type=float, default=math.inf, help="requests per second (default: all at once)")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape: 1 = Poisson, <1 burstier")
    p.add_argument("--input-len", type=int, default=128, help="random: prompt words")
    p.add_argument("--output-len", type=int, default=64, help="tokens generated per request")
    p.add_argument("--range-ratio", type=float, default=0.0, help="random: lengths vary by +- this fraction")
    p.add_argument("--num-prefix-groups", type=int, default=4, help="shared-prefix: distinct prefixes")
    p.add_argument("--prefix-len", type=int, default=256, help="shared-prefix: words in each prefix")
    p.add_argument("--suffix-len", type=int, default=32, help="shared-prefix: words after the prefix")
    p.add_argument("--percentiles", default="50,95,99")
    p.add_argument("--goodput", nargs="*", metavar="NAME:MS", help="SLOs, e.g. ttft:500 tpot:50 e2el:5000")
    p.add_argument("--warmup", type=int, default=0, help="requests sent (one at a time) before measuring")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_out", default=None, help="write the configuration and results here")
    p.add_argument(
        "--plots",
        metavar="DIR",
        default=None,
        help="write PNG plots here: latency CDFs, and the fleet over time when the URL is a shoal up gateway",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import time
    from dataclasses import asdict

    from shoal.loadgen.datasets import random_dataset, shared_prefix_dataset
    from shoal.loadgen.report import format_summary, summarize
    from shoal.loadgen.runner import BenchConfig, run_benchmark

    slos = _slos(args.goodput)
    percentiles = [float(q) for q in args.percentiles.split(",") if q]
    total = args.num_requests + args.warmup
    if args.dataset == "random":
        requests = random_dataset(total, args.input_len, args.output_len, args.range_ratio, args.seed)
    else:
        requests = shared_prefix_dataset(
            total, args.num_prefix_groups, args.prefix_len, args.suffix_len, args.output_len, args.seed
        )
    config = BenchConfig(
        url=args.url,
        model=args.model,
        concurrency=args.concurrency,
        request_rate=args.request_rate,
        burstiness=args.burstiness,
        seed=args.seed,
        timeout_s=args.timeout,
        progress=args.progress,
        endpoint=args.endpoint,
        api_key=args.api_key,
    )
    started = time.time()
    results, duration = asyncio.run(run_benchmark(config, requests[args.warmup :], requests[: args.warmup]))
    summary = summarize(results, duration, percentiles, slos)
    print(format_summary(summary))
    if args.json_out:
        record: dict[str, Any] = {
            "config": {**vars(args), "func": None, "request_rate": str(args.request_rate), "api_key": None},
            "summary": summary,
        }
        record["results"] = [asdict(r) for r in results]
        with open(args.json_out, "w") as out:
            json.dump(record, out, indent=2)
    if args.plots:
        from pathlib import Path

        from shoal.loadgen.plots import fetch_timeline, write_plots

        timeline = fetch_timeline(args.url, started, time.time())
        for path in write_plots(Path(args.plots), results, timeline, started):
            print(f"wrote {path}")
        if not timeline:
            print(f"no fleet timeline at {args.url}/dashboard/data (a shoal up gateway serves one): latency CDF only")
    return 0 if summary["failed"] == 0 else 1
