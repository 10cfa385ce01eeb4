"""``shoal up --demo``: once the fleet serves, a scripted burst through the gateway that makes the autoscaler
scale up, then a few questions answered through the same URL, then a clean stop. ``make demo`` runs it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from shoal.bench.datasets import shared_prefix_dataset
from shoal.bench.report import format_summary, summarize
from shoal.bench.runner import BenchConfig, run_benchmark
from shoal.local.up import Up

BURST_REQUESTS = 48
BURST_CONCURRENCY = 16
BURST_OUTPUT_TOKENS = 32
FIRST_QUESTION = "What is the capital of France?"
LAST_QUESTION = "Name three primary colors."
READY_TIMEOUT_S = 600.0


async def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{what} not within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def _gateway_ready(client: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await client.get(url + "/ready", timeout=2)).status_code == 200
    except httpx.HTTPError:
        return False


async def _ask(client: httpx.AsyncClient, url: str, model: str, question: str) -> str:
    body = {"model": model, "max_tokens": 48, "temperature": 0, "messages": [{"role": "user", "content": question}]}
    response = await client.post(url + "/v1/chat/completions", json=body)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"]).strip()


async def run_demo(up: Up, say: Callable[[str], None]) -> None:
    """Runs beside ``up.run``; sets ``up.stopping`` when done (or when it cannot go on)."""
    model, url = up.manifest.spec.served_name, up.url
    started = time.monotonic()
    try:
        async with httpx.AsyncClient(timeout=300) as client:
            await _until(lambda: up.fleet.ever_ready, READY_TIMEOUT_S, "a first ready engine")
            while not await _gateway_ready(client, url):
                await asyncio.sleep(0.5)
            answer = await _ask(client, url, model, FIRST_QUESTION)
            say(
                f"demo: first answer {time.monotonic() - started:.0f} s after start\n"
                f"demo: Q: {FIRST_QUESTION}\ndemo: A: {answer}"
            )
            say(f"demo: burst of {BURST_REQUESTS} requests, {BURST_CONCURRENCY} at a time, to {url}/v1")
            most = 0

            def watch() -> int:
                nonlocal most
                most = max(most, up.snapshot.count("ready") if up.snapshot else 0)
                return most

            requests = shared_prefix_dataset(BURST_REQUESTS, 4, 32, 8, BURST_OUTPUT_TOKENS, seed=0)
            burst = asyncio.create_task(
                run_benchmark(
                    BenchConfig(url=url, model=model, concurrency=BURST_CONCURRENCY, progress=False), requests
                )
            )
            while not burst.done():
                watch()
                await asyncio.sleep(0.5)
            results, duration = burst.result()
            say("demo: burst done\n" + format_summary(summarize(results, duration, [50, 95], {})))
            say(f"demo: most engines ready at once during the burst: {watch()}")
            decisions = (
                "\n".join(
                    f"demo:   {d.from_replicas} -> {d.to_replicas} {d.rule}: {d.message}" for d in up.snapshot.decisions
                )
                if up.snapshot
                else ""
            )
            say(f"demo: scaling decisions so far:\n{decisions or 'demo:   none'}")
            say(f"demo: Q: {LAST_QUESTION}\ndemo: A: {await _ask(client, url, model, LAST_QUESTION)}")
    except Exception as exc:  # noqa: BLE001 - the demo reports any failure and still stops the fleet
        say(f"demo: failed: {exc!r}")
        up.failed = f"demo failed: {exc!r}"
    finally:
        up.stopping.set()
