"""Drives a benchmark: sends the dataset on its arrival schedule, capped at a concurrency, and times it.

Concurrency and request rate combine as in ``vllm bench serve``: requests arrive by the gamma process of
``request_rate`` (all at once when infinite) and at most ``concurrency`` are in flight (no cap when unset).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

import httpx
from tqdm import tqdm

from shoal.loadgen.arrivals import arrival_gaps
from shoal.loadgen.client import COMPLETIONS, RequestResult, send_request
from shoal.loadgen.datasets import BenchRequest


@dataclass(frozen=True)
class BenchConfig:
    url: str
    model: str
    concurrency: int | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    seed: int = 0
    timeout_s: float = 600.0
    progress: bool = True
    endpoint: str = COMPLETIONS
    api_key: str | None = None  # sent as ``Authorization: Bearer``, as the openai client does


async def run_benchmark(
    config: BenchConfig, requests: list[BenchRequest], warmup: list[BenchRequest] | None = None
) -> tuple[list[RequestResult], float]:
    """Results in dataset order and the wall-clock duration; ``warmup`` requests go first, one at a time,
    unmeasured (the first requests of a fresh server pay for lazy initialisation)."""
    gaps = arrival_gaps(len(requests), config.request_rate, config.burstiness, config.seed)
    connections = min(config.concurrency or len(requests), 1024) or 1
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    in_flight = asyncio.Semaphore(config.concurrency) if config.concurrency else None
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(config.timeout_s), limits=limits, headers=headers, trust_env=False
    ) as client:
        for req in warmup or []:
            await send_request(client, config.url, config.model, req, config.endpoint)
        with tqdm(total=len(requests), disable=not config.progress, desc="requests") as bar:

            async def one(req: BenchRequest) -> RequestResult:
                if in_flight is None:
                    result = await send_request(client, config.url, config.model, req, config.endpoint)
                else:
                    async with in_flight:
                        result = await send_request(client, config.url, config.model, req, config.endpoint)
                bar.update(1)
                return result

            start = time.perf_counter()
            tasks = []
            for req, gap in zip(requests, gaps, strict=True):
                if gap > 0:
                    await asyncio.sleep(gap)
                tasks.append(asyncio.create_task(one(req)))
            results = await asyncio.gather(*tasks)
            duration = time.perf_counter() - start
    return list(results), duration
