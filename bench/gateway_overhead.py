"""Overhead benchmark: what ``shoal gateway`` adds to each request, against going direct, in the same run.

Two FakeBackends (``bench/gateway_fake_backend.py``: generate nothing) stand in for engines, so every extra
microsecond is the router's. By default they answer at once, so a closed loop of streams measures the router at
saturation; ``--chunk-interval-ms`` paces their events like decode steps, so N streams bring the load N real
LLM streams bring, and "added" is what a client of such a fleet pays. A closed loop of ``--concurrency``
streams sends short streaming completions and reads each to its end: straight to the backends (alternating),
through the gateway (prefix-aware policy with SmolLM2's real tokenizer, so tokenizing and hashing are in the
path), and through each Rust router named with ``--rust-router NAME=PYTHON`` (a Python that has
``sglang-router`` or ``vllm-router`` from PyPI, e.g. a scratch venv; their default policies). The targets take
turns for ``--rounds`` rounds, so drift on a shared machine falls on all of them alike. A byte-copying TCP
relay (``bench/tcp_relay.py``) is measured too: what one more process hop costs here, whatever it does. Paced
streams start spread over one stream's length, as independent clients would (``--synchronized``: all at
once, so each round of requests arrives as one burst). Reported, as medians
over rounds: requests per second, latency p50/p99, each router's added latency (its median percentile minus
direct's), and the CPU time each router process used per request (from ``/proc``, warm-up included: the
figure least disturbed by other work on the machine).

    .venv/bin/python bench/gateway_overhead.py --requests 3000 --concurrency 1 32 [--chunk-interval-ms 20] \
        --rust-router sglang-router=/tmp/routers-venv/bin/python --rust-router vllm-router=/tmp/routers-venv/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from gateway_fleet import start_gateway

from shoal.loadgen.report import percentile
from shoal.local import LocalProcess, free_port

HERE = Path(__file__).resolve().parent
CHUNKS = 8  # SSE events per stream, then [DONE]
BODY = json.dumps(
    {"model": "fake", "prompt": "Explain backpressure in simple terms, please.", "max_tokens": 8, "stream": True}
).encode()


async def load(
    urls: list[str], requests: int, concurrency: int, warmup: int, stagger_s: float = 0.0
) -> dict[str, float]:
    """Closed loop: ``concurrency`` workers, each sending the next request as soon as its last one ended.

    Worker ``i`` starts ``i / concurrency * stagger_s`` late: with streams of one length, workers that start
    together stay in step forever, and every round of requests reaches the router as one burst.
    """
    targets = itertools.cycle(urls)
    latencies: list[float] = []
    counter = itertools.count()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> float:
            started = time.perf_counter()
            async with session.post(
                next(targets) + "/v1/completions", data=BODY, headers={"Content-Type": "application/json"}
            ) as response:
                assert response.status == 200, await response.text()
                await response.read()
            return time.perf_counter() - started

        for _ in range(warmup):
            await one()

        async def worker(delay_s: float) -> None:
            await asyncio.sleep(delay_s)
            while next(counter) < requests:
                latencies.append(await one())

        started = time.perf_counter()
        await asyncio.gather(*(worker(i / concurrency * stagger_s) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


def measure(
    name: str, urls: list[str], args: argparse.Namespace, router: LocalProcess | None = None
) -> list[dict[str, Any]]:
    """One row per concurrency level; a single stream shows the path's cost, 32 streams its throughput."""
    rows = []
    for concurrency in args.concurrency:
        requests = args.requests if concurrency > 1 else args.requests // 3
        cpu_before = router.cpu_seconds() if router else 0.0
        stagger_s = 0.0 if args.synchronized else (CHUNKS + 1) * args.chunk_interval_ms / 1000
        row: dict[str, Any] = {
            "target": name,
            "concurrency": concurrency,
            **uvloop.run(load(urls, requests, concurrency, args.warmup, stagger_s)),
        }
        if router is not None:
            row["cpu_us_per_request"] = (router.cpu_seconds() - cpu_before) / (requests + args.warmup) * 1e6
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so the finally blocks stop every child
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--chunk-interval-ms",
        type=float,
        default=0.0,
        help="backends send one SSE event per interval (0: the whole stream at once)",
    )
    parser.add_argument("--tokenizer", default="smollm2-135m", help="tokenizer the gateway uses for model `fake`")
    parser.add_argument(
        "--rust-router",
        action="append",
        default=[],
        metavar="NAME=PYTHON",
        help="sglang-router or vllm-router, run by a Python that has it installed",
    )
    parser.add_argument(
        "--synchronized",
        action="store_true",
        help="start every stream at once (paced streams then arrive in bursts of --concurrency)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="times every target is measured, alternating")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gateway-overhead-") as tmp:
        logs = Path(tmp)
        backend = [
            sys.executable,
            str(HERE / "gateway_fake_backend.py"),
            "--chunks",
            str(CHUNKS),
            "--chunk-interval-ms",
            str(args.chunk_interval_ms),
        ]
        backends = [LocalProcess(backend, logs / f"backend-{i}.log") for i in range(2)]
        processes = list(backends)
        try:
            for backend in backends:
                backend.wait_ready()
            urls = [b.url for b in backends]
            relay = LocalProcess(
                [sys.executable, str(HERE / "tcp_relay.py"), *(a for url in urls for a in ("--backend", url))],
                logs / "relay.log",
            )
            processes.append(relay)
            relay.wait_ready()
            gateway = start_gateway(urls, logs, "--tokenizer", f"fake={args.tokenizer}", "--no-kv-events")
            processes.append(gateway)
            targets: list[tuple[str, list[str], LocalProcess | None]] = [
                ("direct", urls, None),
                ("tcp relay", [relay.url], relay),
                ("shoal gateway", [gateway.url], gateway),
            ]
            for spec in args.rust_router:
                name, _, python = spec.partition("=")
                router = start_rust_router(name, python, urls, logs)
                processes.append(router)
                targets.append((name, [router.url], router))
            for round_ in range(args.rounds):  # alternating targets, so drift on a shared machine hits them alike
                for name, target_urls, process in targets:
                    rows.extend({**row, "round": round_} for row in measure(name, target_urls, args, process))
        finally:
            for process in processes:
                process.stop()
    print_summary(rows)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))


def start_rust_router(name: str, python: str, urls: list[str], logs: Path) -> LocalProcess:
    module = {"sglang-router": "sglang_router.launch_router", "vllm-router": "vllm_router.launch_router"}[name]
    router = LocalProcess(
        [
            python,
            "-m",
            module,
            "--host",
            "127.0.0.1",
            "--worker-urls",
            *urls,
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(free_port()),
        ],
        logs / f"{name}.log",
    )
    router.wait_ready("/health", timeout=60)
    return router


def print_summary(rows: list[dict[str, Any]]) -> None:
    """Each figure is the median over rounds; "added" is the router's median minus direct's."""
    keys = ("rps", "p50_ms", "p99_ms", "cpu_us_per_request")
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["target"], row["concurrency"]), []).append(row)
    median = {
        group: {k: statistics.median(r[k] for r in members) if k in members[0] else float("nan") for k in keys}
        for group, members in groups.items()
    }
    print(
        f"\n{'target':<16}{'streams':>8}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'added p50':>11}{'added p99':>11}"
        f"{'CPU us/req':>12}"
    )
    for (target, concurrency), m in sorted(median.items(), key=lambda item: item[0][1]):
        direct = median[("direct", concurrency)]
        print(
            f"{target:<16}{concurrency:>8}{m['rps']:>9.0f}{m['p50_ms']:>9.2f}{m['p99_ms']:>9.2f}"
            f"{m['p50_ms'] - direct['p50_ms']:>11.2f}{m['p99_ms'] - direct['p99_ms']:>11.2f}"
            f"{m['cpu_us_per_request']:>12.0f}"
        )


if __name__ == "__main__":
    main()
