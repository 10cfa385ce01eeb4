"""Cancellation storm: thousands of streaming requests through the gateway, each abandoned at a random point.

Every request asks for far more tokens than it will read (``ignore_eos``), so an engine only stops working on
one if the gateway closes its upstream when the client leaves. Clients leave at a random time (one in five within
5 ms, the rest uniformly in ``[0, --max-cancel-s)``): some before the request is routed, some while waiting for
the first token, most mid-stream. Afterwards, once the fleet is idle, every engine must hold no running or waiting request and no KV
block (the cache's usage ratio back to 0), and the gateway no lease (in-flight requests and tokens per backend
back to 0). The CI test (``tests/reliability/test_cancellation_storm.py``) runs a few hundred through an
in-process gateway; this script runs thousands through ``shoal gateway`` and prints the same checks.

    .venv/bin/python bench/cancellation_storm.py --requests 3000 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from shoal.local import metric

BODY = {
    "model": "tiny",
    "prompt": "Once upon a time, in a land far away,",
    "max_tokens": 1500,
    "stream": True,
    "ignore_eos": True,
}


@dataclass
class StormResult:
    requests: int
    cancelled_before_first_byte: int
    cancelled_mid_stream: int
    completed: int
    errors: int
    seconds: float


EARLY_SHARE, EARLY_S = 0.2, 0.005


def cancel_time(rng: random.Random, max_cancel_s: float) -> float:
    """When a client leaves: one in five within 5 ms (before even an idle fleet answers), the rest uniformly."""
    return rng.uniform(0, EARLY_S) if rng.random() < EARLY_SHARE else rng.uniform(0, max_cancel_s)


async def storm(
    gateway_url: str, requests: int, concurrency: int, max_cancel_s: float, seed: int = 0, model: str = "tiny"
) -> StormResult:
    """Sends ``requests`` streams, ``concurrency`` at a time, each abandoned after a random time."""
    rng = random.Random(seed)
    counts = {"before": 0, "mid": 0, "done": 0, "errors": 0}
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)

    async def one(client: httpx.AsyncClient, cancel_after: float) -> None:
        got_bytes = False

        async def read() -> None:
            nonlocal got_bytes
            async with client.stream("POST", gateway_url + "/v1/completions", json={**BODY, "model": model}) as r:
                if r.status_code != 200:
                    counts["errors"] += 1
                    return
                async for _ in r.aiter_raw():
                    got_bytes = True
            counts["done"] += 1

        async with gate:
            try:
                await asyncio.wait_for(read(), cancel_after)
            except TimeoutError:
                counts["mid" if got_bytes else "before"] += 1
            except httpx.HTTPError:
                counts["errors"] += 1

    started = time.monotonic()
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(one(client, cancel_time(rng, max_cancel_s)) for _ in range(requests)))
    return StormResult(
        requests,
        counts["before"],
        counts["mid"],
        counts["done"],
        counts["errors"],
        round(time.monotonic() - started, 2),
    )


def engine_leftovers(url: str) -> dict[str, float]:
    """What an engine still holds: running and waiting requests, and the share of its KV blocks in use."""
    return {
        name: metric(url, f"shoal_engine_{name}")
        for name in ("requests_running", "requests_waiting", "kv_cache_usage_ratio")
    }


def gateway_leftovers(url: str) -> dict[str, float]:
    """What the gateway still charges its backends: in-flight requests and tokens (leases not given back)."""
    return {name: metric(url, f"shoal_gateway_backend_{name}") for name in ("in_flight_requests", "in_flight_tokens")}


def wait_until_idle(engines: list[str], gateway: str, timeout: float = 60.0) -> dict[str, dict[str, float]]:
    """Polls until every engine and the gateway hold nothing; returns the last readings (held or not)."""
    deadline = time.monotonic() + timeout
    while True:
        readings = {url: engine_leftovers(url) for url in engines} | {gateway: gateway_leftovers(gateway)}
        if all(v == 0 for reading in readings.values() for v in reading.values()) or time.monotonic() > deadline:
            return readings
        time.sleep(0.5)


def main() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from gateway_fleet import start_engines, start_gateway

    sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "engine"))
    from tiny_checkpoints import build_checkpoint

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--max-cancel-s", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_checkpoint(Path(tmp) / "model", "llama", seed=3, max_position_embeddings=2048)
        engines = start_engines(str(model), args.engines, "tiny", Path(tmp), "--num-kv-blocks", "512")
        gateway = start_gateway([e.url for e in engines], Path(tmp))
        try:
            result = asyncio.run(storm(gateway.url, args.requests, args.concurrency, args.max_cancel_s, args.seed))
            leftovers = wait_until_idle([e.url for e in engines], gateway.url)
        finally:
            for process in (gateway, *engines):
                process.stop()
    clean = all(v == 0 for reading in leftovers.values() for v in reading.values())
    print(json.dumps({"result": asdict(result), "leftovers": leftovers, "clean": clean}, indent=2))
    raise SystemExit(0 if clean and result.errors == 0 else 1)


if __name__ == "__main__":
    main()
