"""The direct-scrape source against real ``shoal serve`` engines: gauges as they are, arrivals and TTFT P95 from
counter and bucket increments, and every way a replica can fail to answer reported as missing, never as zero."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import httpx
import pytest
from scraped_fleet import ScrapedFleet, paused

from shoal.autoscale import AutoscalingConfig, ShoalPolicy
from shoal.autoscale.scrape_source import ScrapeSource
from shoal.autoscale.source import ReplicaTarget

pytestmark = pytest.mark.timeout(300)


async def test_idle_engines_report_empty_queues_and_no_first_tokens(scraped_fleet: ScrapedFleet) -> None:
    async with httpx.AsyncClient() as client:
        source = ScrapeSource(client)
        first = await source.observe(time.time(), 2, scraped_fleet.targets())
        assert first.missing is None
        assert [(r.name, r.waiting, r.running) for r in first.replicas] == [
            ("engine-0", 0.0, 0.0),
            ("engine-1", 0.0, 0.0),
        ]
        assert all(r.kv_usage == 0.0 for r in first.replicas)
        assert first.arrival_rate is None  # no increment before a second scrape: unknown, not zero
        second = await source.observe(time.time(), 2, scraped_fleet.targets())
        assert second.arrival_rate == 0.0 and second.output_tokens_per_second == 0.0
        assert second.ttft_p95_seconds is None  # an empty histogram window is no TTFT, not a TTFT of zero
        assert second.tpot_p90_seconds is None  # nor a time per output token


async def test_a_burst_shows_as_a_queue_then_as_arrivals_and_a_ttft_p95(scraped_fleet: ScrapedFleet) -> None:
    async with httpx.AsyncClient() as client:
        source = ScrapeSource(client, rate_window_seconds=600, ttft_window_seconds=600)
        start = time.time()
        await source.observe(start, 2, scraped_fleet.targets())
        burst = asyncio.get_running_loop().run_in_executor(None, scraped_fleet.load, 0, 6, 32)
        peak = 0.0
        while not burst.done():
            signals = await source.observe(time.time(), 2, scraped_fleet.targets())
            peak = max(peak, signals.replicas[0].waiting or 0.0)
            await asyncio.sleep(0.05)
        latencies = await burst
        end = time.time()
        signals = await source.observe(end, 2, scraped_fleet.targets())
    assert peak >= 1.0, "6 requests on an engine running one at a time must queue"
    # every arrival counted exactly once: finished plus the in-flight change, over the span since the first scrape
    assert signals.arrival_rate is not None
    assert signals.arrival_rate * (end - start) == pytest.approx(6.0)
    assert signals.output_tokens_per_second is not None
    assert signals.output_tokens_per_second * (end - start) == pytest.approx(6 * 32)
    assert signals.ttft_p95_seconds is not None
    assert 0.0 < signals.ttft_p95_seconds <= max(latencies) * 1.5  # bucket interpolation, never beyond a bucket
    # a token's interval is a slice of its request's latency (the inter-token histogram, read for the drain's check)
    assert signals.tpot_p90_seconds is not None
    assert 0.0 < signals.tpot_p90_seconds <= max(latencies)


async def test_a_hanging_replica_is_missing_not_idle(scraped_fleet: ScrapedFleet) -> None:
    async with httpx.AsyncClient() as client:
        source = ScrapeSource(client, timeout_seconds=0.5)
        with paused(scraped_fleet.engines[1].process.pid):
            began = time.monotonic()
            signals = await source.observe(time.time(), 2, scraped_fleet.targets())
            took = time.monotonic() - began
        assert took < 5.0, "the hung replica must cost one short timeout, not hang the observation"
        hung = signals.replicas[1]
        assert (hung.name, hung.waiting, hung.running) == ("engine-1", None, None)
        assert signals.replicas[0].waiting == 0.0 and signals.missing is None
        decision = ShoalPolicy(AutoscalingConfig(scale_down_stabilization_seconds=0)).decide(
            replace(signals, arrival_rate=0.0, desired=2)
        )
        assert (decision.replicas, decision.rule) == (2, "HoldMissingMetrics")

        with paused(scraped_fleet.engines[0].process.pid), paused(scraped_fleet.engines[1].process.pid):
            blind = await source.observe(time.time(), 2, scraped_fleet.targets())
        assert blind.missing is not None and "timed out after 0.5s" in blind.missing


async def test_unreachable_and_unreadable_replicas_say_why(scraped_fleet: ScrapedFleet) -> None:
    engine = scraped_fleet.engines[0]
    async with httpx.AsyncClient() as client:
        source = ScrapeSource(client, timeout_seconds=2.0)
        dead = await source.observe(time.time(), 1, [ReplicaTarget("gone", "ready", 0.0, scraped_fleet.dead_url)])
        assert dead.missing is not None and "gone: /metrics unreachable: ConnectError" in dead.missing
        # a JSON page where /metrics should be (the engine's model list, reached through a query string)
        wrong = await source.observe(time.time(), 1, [ReplicaTarget("odd", "ready", 0.0, f"{engine.url}/v1/models?x=")])
        assert wrong.missing is not None and "odd: /metrics unreadable: not Prometheus text" in wrong.missing
        absent = await source.observe(time.time(), 1, [ReplicaTarget("lost", "ready", 0.0, f"{engine.url}/nowhere")])
        assert absent.missing is not None and "lost: /metrics answered 404" in absent.missing


async def test_starting_replicas_are_listed_and_not_scraped(scraped_fleet: ScrapedFleet) -> None:
    async with httpx.AsyncClient() as client:
        targets = [*scraped_fleet.targets(), ReplicaTarget("loading", "starting", 5.0, scraped_fleet.dead_url)]
        signals = await ScrapeSource(client).observe(time.time(), 3, targets)
    assert signals.missing is None
    assert [(r.name, r.phase) for r in signals.starting] == [("loading", "starting")]
