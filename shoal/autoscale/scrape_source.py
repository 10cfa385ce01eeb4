"""The direct-scrape source: every ready engine's ``/metrics``, read concurrently, differenced between scrapes.

For fleets without a Prometheus (local mode, or the operator with ``metrics.source: scrape``). Each observation
reads the gauges as they are (queue, running, KV usage, the batch limit) and what the counters did since this source's previous
scrape of the same engine:

- **arrival rate**: requests that ended (finished, or turned away for a full queue) plus the growth of those in
  flight, per second, over ``rate_window_seconds``; arrivals, not completions, so a saturated fleet shows the
  demand it is failing to serve;
- **TTFT P95**: the TTFT histogram's bucket increments of all engines summed over ``ttft_window_seconds``, and
  the quantile taken as ``histogram_quantile`` would (None when no first token was produced in the window);
- **time per output token P90**: the same over the inter-token latency histogram (what a drain must allow);
- **output tokens/s**: generated-token increments over the rate window.

A counter that went down means the engine restarted: its increment is its new value, as Prometheus's ``rate``
does. ``metrics`` names the engine kind's series (Shoal's by default); a rate the kind has no counter for
(llama.cpp exports no finished-request counter and no TTFT histogram) is None, never zero. An engine that does not answer within ``timeout_seconds`` (down, hung, garbage) is reported with None
values, never as an idle one; when none answers, the whole observation is ``missing``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from shoal.autoscale.engine_page import SHOAL_METRICS, EnginePage, PageError, parse_engine_page
from shoal.autoscale.histogram import bucket_quantile
from shoal.autoscale.signals import FleetSignals, ReplicaSignals
from shoal.autoscale.source import ReplicaTarget
from shoal.engine_kinds import MetricMap


@dataclass(frozen=True)
class _Increment:
    """What the fleet's counters did between ``start`` and ``end`` (engines read at both scrapes only)."""

    start: float
    end: float
    arrivals: float | None
    generated: float | None
    ttft_buckets: dict[float, float]
    itl_buckets: dict[float, float]


def _grew(now: float, before: float) -> float:
    return now - before if now >= before else now


def _add_growth(total: dict[float, float], now: dict[float, float], before: dict[float, float]) -> None:
    """Adds one engine's bucket increments since its previous scrape to ``total``."""
    for bound, count in now.items():
        total[bound] = total.get(bound, 0.0) + _grew(count, before.get(bound, 0.0))


def _add(total: float | None, now: float | None, before: float | None, extra: float = 0.0) -> float | None:
    """``total`` plus a counter's growth (and ``extra``); None once any engine lacks the counter."""
    if total is None or now is None or before is None:
        return None
    return total + _grew(now, before) + extra


def _rate(increments: list[float | None], span: float) -> float | None:
    return None if any(i is None for i in increments) else sum(i for i in increments if i is not None) / span


class ScrapeSource:
    """A :class:`~shoal.autoscale.source.MetricsSource` reading engines' ``/metrics`` directly."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        timeout_seconds: float = 2.0,
        rate_window_seconds: float = 10.0,
        ttft_window_seconds: float = 30.0,
        metrics: MetricMap = SHOAL_METRICS,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.timeout_seconds = timeout_seconds
        self.rate_window_seconds = rate_window_seconds
        self.ttft_window_seconds = ttft_window_seconds
        self._previous: dict[str, tuple[float, EnginePage]] = {}
        self._increments: deque[_Increment] = deque()

    async def observe(self, now: float, desired: int, replicas: Sequence[ReplicaTarget]) -> FleetSignals:
        ready = [r for r in replicas if r.phase == "ready"]
        pages = await asyncio.gather(*(self._read(r) for r in ready))
        read = {r.name: page for r, page in zip(ready, pages, strict=True) if isinstance(page, EnginePage)}
        self._remember(now, read, {r.name for r in replicas})
        failures = [f"{r.name}: {page}" for r, page in zip(ready, pages, strict=True) if isinstance(page, str)]
        missing = f"no engine answered /metrics ({'; '.join(failures)})" if ready and not read else None
        arrival, generated = self._rates(now)
        ttft = self._quantile(now, 0.95, "ttft_buckets")
        tpot = self._quantile(now, 0.90, "itl_buckets")
        return FleetSignals(
            time=now,
            desired=desired,
            replicas=tuple(self._replica(r, read.get(r.name)) for r in replicas),
            ttft_p95_seconds=ttft,
            tpot_p90_seconds=tpot,
            arrival_rate=arrival,
            output_tokens_per_second=generated,
            missing=missing,
        )

    async def _read(self, replica: ReplicaTarget) -> EnginePage | str:
        """The engine's page, or why there is none."""
        if replica.url is None:
            return "no address to scrape"
        try:
            response = await asyncio.wait_for(
                self.client.get(f"{replica.url}/metrics", timeout=self.timeout_seconds), self.timeout_seconds
            )
        except (TimeoutError, httpx.TimeoutException):
            return f"/metrics timed out after {self.timeout_seconds:g}s"
        except httpx.HTTPError as error:
            return f"/metrics unreachable: {error.__class__.__name__}: {error}"
        if response.status_code != 200:
            return f"/metrics answered {response.status_code}"
        try:
            return parse_engine_page(response.text, self.metrics)
        except PageError as error:
            return f"/metrics unreadable: {error}"

    def _replica(self, target: ReplicaTarget, page: EnginePage | None) -> ReplicaSignals:
        if page is None:
            return ReplicaSignals(target.name, target.phase, target.since)
        return ReplicaSignals(
            target.name,
            target.phase,
            target.since,
            waiting=page.waiting,
            running=page.running,
            kv_usage=page.kv_usage,
            max_num_seqs=page.max_num_seqs,
        )

    def _remember(self, now: float, read: dict[str, EnginePage], known: set[str]) -> None:
        """Records the increments since each engine's previous scrape, keeps this scrape for the next."""
        arrivals: float | None = 0.0
        generated: float | None = 0.0
        ttft: dict[float, float] = {}
        itl: dict[float, float] = {}
        start = now
        for name, page in read.items():
            previous = self._previous.get(name)
            if previous is None:
                continue
            then, before = previous
            start = min(start, then)
            arrivals = _add(arrivals, page.ended, before.ended, page.in_flight - before.in_flight)
            generated = _add(generated, page.generated, before.generated)
            _add_growth(ttft, page.ttft_buckets, before.ttft_buckets)
            _add_growth(itl, page.itl_buckets, before.itl_buckets)
        if start < now:
            self._increments.append(
                _Increment(start, now, None if arrivals is None else max(arrivals, 0.0), generated, ttft, itl)
            )
        # an engine not read this time is differenced against its last good scrape later; gone ones are dropped
        kept = {name: last for name, last in self._previous.items() if name in known and name not in read}
        self._previous = kept | {name: (now, page) for name, page in read.items()}
        horizon = now - max(self.rate_window_seconds, self.ttft_window_seconds)
        while self._increments and self._increments[0].end <= horizon:
            self._increments.popleft()

    def _rates(self, now: float) -> tuple[float | None, float | None]:
        """(arrival rate, output tokens/s) over the rate window; None before two scrapes."""
        rate_window = [i for i in self._increments if i.end > now - self.rate_window_seconds]
        arrival = generated = None
        if rate_window:
            span = now - min(i.start for i in rate_window)
            arrival = _rate([i.arrivals for i in rate_window], span)
            generated = _rate([i.generated for i in rate_window], span)
        return arrival, generated

    def _quantile(self, now: float, q: float, histogram: str) -> float | None:
        """A latency quantile over ``ttft_window_seconds`` (None when nothing was observed in it)."""
        buckets: dict[float, float] = {}
        for increment in self._increments:
            if increment.end > now - self.ttft_window_seconds:
                for bound, count in getattr(increment, histogram).items():
                    buckets[bound] = buckets.get(bound, 0.0) + count
        return bucket_quantile(q, buckets) if buckets else None
