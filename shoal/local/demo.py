"""``shoal up --demo``: once the fleet serves, a burst through the gateway that makes the autoscaler scale up, then
a few questions answered through the same URL, then a clean stop. ``make demo`` runs it.

The burst is driven by the fleet's state, not a fixed count: rounds of requests, 16 at a time, go on until every
engine the autoscaler asked for is ready and each engine that started during the burst has served part of it (seen
running requests), so the demo shows a scale-up taking traffic on a fast machine as on a slow one. Past
``BURST_LIMIT_S`` it stops and says what the policy last decided instead."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import httpx

from shoal.loadgen.client import RequestResult
from shoal.loadgen.datasets import shared_prefix_dataset
from shoal.loadgen.report import format_summary, summarize
from shoal.loadgen.runner import BenchConfig, run_benchmark
from shoal.local.up import Up

ROUND_REQUESTS = 32
BURST_CONCURRENCY = 16
BURST_OUTPUT_TOKENS = 32
BURST_LIMIT_S = 600.0
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


class BurstWatch:
    """What the burst saw of the fleet: the engines ready when it began, the most ready at once, and the engines
    that became ready during it and then ran requests."""

    def __init__(self, up: Up) -> None:
        self.up = up
        # from the fleet itself: the view's snapshot may predate the first engine's readiness by a tick
        self.first = {r.name for r in up.fleet.replicas}
        self.most_ready = sum(r.phase == "ready" for r in up.fleet.replicas)
        self.served_by_new: set[str] = set()

    def look(self) -> None:
        snapshot = self.up.snapshot
        if snapshot is None:
            return
        self.most_ready = max(self.most_ready, snapshot.count("ready"))
        for replica in snapshot.replicas:
            if replica.phase == "ready" and replica.name not in self.first and (replica.running or 0) > 0:
                self.served_by_new.add(replica.name)

    def scaled_and_serving(self) -> bool:
        """Every engine asked for is ready, more than at the start, and each new one has served."""
        snapshot = self.up.snapshot
        if snapshot is None or snapshot.desired <= len(self.first) or snapshot.count("ready") < snapshot.desired:
            return False
        new = {r.name for r in snapshot.replicas if r.phase == "ready"} - self.first
        return bool(new) and new <= self.served_by_new


async def _burst(up: Up, url: str, model: str) -> tuple[list[RequestResult], float, BurstWatch]:
    """Rounds of ``ROUND_REQUESTS`` until the watch says the scale-up serves, or ``BURST_LIMIT_S`` passes."""
    watch = BurstWatch(up)
    results: list[RequestResult] = []
    started = time.monotonic()
    config = BenchConfig(url=url, model=model, concurrency=BURST_CONCURRENCY, progress=False)
    for round_number in itertools.count():
        requests = shared_prefix_dataset(ROUND_REQUESTS, 4, 32, 8, BURST_OUTPUT_TOKENS, seed=round_number)
        sent = asyncio.create_task(run_benchmark(config, requests))
        while not sent.done():
            watch.look()
            await asyncio.sleep(0.5)
        results += sent.result()[0]
        watch.look()
        if watch.scaled_and_serving() or time.monotonic() - started > BURST_LIMIT_S:
            break
    return results, time.monotonic() - started, watch


def _why_not(up: Up, burst: BurstWatch) -> str:
    """Nothing when a new engine served; else what the policy last decided, so a held scale-up is explained."""
    if burst.served_by_new:
        return ""
    last = up.autoscaler.last if up.autoscaler else None
    return f" (none within {BURST_LIMIT_S:.0f} s; the policy's last rule: {last.rule if last else 'none'})"


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
            say(f"demo: burst of requests, {BURST_CONCURRENCY} at a time, to {url}/v1, until new engines serve it")
            results, duration, burst = await _burst(up, url, model)
            say("demo: burst done\n" + format_summary(summarize(results, duration, [50, 95], {})))
            say(f"demo: most engines ready at once during the burst: {burst.most_ready}")
            say(
                f"demo: engines started during the burst that served it: {len(burst.served_by_new)}{_why_not(up, burst)}"
            )
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
