"""The Prometheus source against the real Prometheus scraping real ``shoal serve`` engines: per-replica queues,
TTFT P95 and arrivals through PromQL, and each way Prometheus or a replica's series can fail becoming missing
data with its reason, never zeros."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
from scraped_fleet import Resending, ScrapedFleet, paused
from support.kube_testbed import free_port
from support.polling import eventually

from shoal.autoscale import AutoscalingConfig, FleetSignals, ShoalPolicy
from shoal.autoscale.prometheus_source import PrometheusSource

pytestmark = pytest.mark.timeout(300)
JOB = 'job="shoal-engines"'


async def observe(
    fleet: ScrapedFleet,
    *,
    url: str | None = None,
    selector: str = JOB,
    dead: bool = False,
    now: float | None = None,
    timeout: float = 10.0,
) -> FleetSignals:
    async with httpx.AsyncClient() as client:
        source = PrometheusSource(client, url or fleet.prometheus.url, selector, timeout_seconds=timeout)
        return await source.observe(time.time() if now is None else now, 2, fleet.targets(dead=dead))


async def test_a_burst_shows_per_replica_queues_ttft_and_arrivals(scraped_fleet: ScrapedFleet) -> None:
    def signals_while(ready: Callable[[FleetSignals], bool]) -> Callable[[], FleetSignals | None]:
        def check() -> FleetSignals | None:
            signals = asyncio.run(observe(scraped_fleet))
            assert signals.missing is None, signals.missing
            assert signals.replicas[1].waiting == 0.0  # the other engine gets nothing
            return signals if ready(signals) else None

        return check

    def in_thread(check: Callable[[], FleetSignals | None], what: str, timeout: float = 60) -> Awaitable[FleetSignals]:
        return asyncio.get_running_loop().run_in_executor(None, lambda: eventually(check, timeout, what))

    def seen_by_clients(s: FleetSignals) -> bool:
        """A TTFT P95 no slower than the clients' own latencies allow (1.5x: the histogram interpolates within a
        bucket). The one-minute window may still hold an earlier test's slower requests on this shared engine
        (the operator's burst test queues 8 on it just before): the clients keep sending until they have left it."""
        ttft = s.ttft_p95_seconds
        return (
            ttft is not None
            and (s.arrival_rate or 0.0) > 0.0
            and bool(load.latencies)
            and 0.0 < ttft <= max(load.latencies) * 1.5
        )

    def drained() -> bool:  # the next tests share this fleet and expect Prometheus to see it idle
        return asyncio.run(observe(scraped_fleet)).replicas[0].waiting == 0.0

    try:
        with Resending(scraped_fleet, 0, clients=6, max_tokens=32) as load:
            await in_thread(
                signals_while(lambda s: (s.replicas[0].waiting or 0.0) >= 1.0),
                "a queue on engine-0 (6 clients on an engine running one at a time)",
            )
            signals = await in_thread(
                signals_while(seen_by_clients), "TTFT P95 within the clients' latencies, and an arrival rate", 150
            )
        assert not load.failures, load.failures
        assert signals.output_tokens_per_second and signals.output_tokens_per_second > 0
        assert signals.tpot_p90_seconds is not None and 0.0 < signals.tpot_p90_seconds <= max(load.latencies)
    finally:
        await asyncio.get_running_loop().run_in_executor(None, lambda: eventually(drained, 60, "an idle engine-0"))


async def test_a_replica_without_series_is_unreported_not_idle(scraped_fleet: ScrapedFleet) -> None:
    signals = await observe(scraped_fleet, dead=True)
    assert signals.missing is None
    by_name = {r.name: r.waiting for r in signals.replicas}
    assert by_name == {"engine-0": 0.0, "engine-1": 0.0, scraped_fleet.dead_name: None}
    decision = ShoalPolicy(AutoscalingConfig(scale_down_stabilization_seconds=0)).decide(signals)
    assert decision.replicas >= 2 and decision.rule == "HoldMissingMetrics"


async def test_an_empty_histogram_is_no_ttft(scraped_fleet: ScrapedFleet) -> None:
    idle = 'job="shoal-engines",pod="engine-1"'
    raw = scraped_fleet.prometheus.query(
        f"histogram_quantile(0.95, sum by (le) (rate(shoal_engine_time_to_first_token_seconds_bucket{{{idle}}}[1m])))"
    )
    assert [sample["value"][1] for sample in raw] == ["NaN"]  # what Prometheus answers: the NaN case is real
    signals = await observe(scraped_fleet, selector=idle)
    assert signals.missing is None and signals.ttft_p95_seconds is None and signals.arrival_rate == 0.0
    assert signals.tpot_p90_seconds is None


async def test_prometheus_down_slow_or_not_prometheus_is_missing_with_the_reason(scraped_fleet: ScrapedFleet) -> None:
    down = await observe(scraped_fleet, url=f"http://127.0.0.1:{free_port()}")
    assert down.missing is not None and "unreachable: ConnectError" in down.missing
    decision = ShoalPolicy(AutoscalingConfig()).decide(down)
    assert (decision.replicas, decision.rule) == (2, "HoldMissingMetrics") and "unreachable" in decision.message

    with paused(scraped_fleet.prometheus.component.process.pid):
        began = time.monotonic()
        slow = await observe(scraped_fleet, timeout=0.5)
        assert time.monotonic() - began < 5.0
    assert slow.missing is not None and "timed out after 0.5s" in slow.missing

    engine = await observe(scraped_fleet, url=scraped_fleet.engines[0].url)  # an HTTP server, not Prometheus
    assert engine.missing is not None and "Prometheus answered 404" in engine.missing


async def test_freshness_is_judged_on_prometheus_clock_not_ours(scraped_fleet: ScrapedFleet) -> None:
    skewed = await observe(scraped_fleet, now=time.time() + 7200.0)
    assert skewed.missing is None and skewed.time > time.time() + 7000
    assert [r.waiting for r in skewed.replicas] == [0.0, 0.0]


async def test_a_replica_prometheus_cannot_scrape_goes_stale(scraped_fleet: ScrapedFleet) -> None:
    with paused(scraped_fleet.engines[1].process.pid):

        def stale() -> FleetSignals | None:
            signals = asyncio.run(observe(scraped_fleet))
            return signals if signals.replicas[1].waiting is None else None

        signals = await asyncio.get_running_loop().run_in_executor(
            None, lambda: eventually(stale, 30, "engine-1 stale")
        )
    assert signals.missing is None and signals.replicas[0].waiting == 0.0
