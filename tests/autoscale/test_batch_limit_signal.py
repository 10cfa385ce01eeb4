"""The batch limit real ``shoal serve`` engines export (``shoal_engine_max_num_seqs``) reaches the policy through
both sources, so a full batch reads as occupancy 1 from the direct scrape and from Prometheus alike."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from scraped_fleet import Resending, ScrapedFleet
from support.polling import eventually

from shoal.autoscale import FleetSignals
from shoal.autoscale.load import fleet_load
from shoal.autoscale.prometheus_source import PrometheusSource
from shoal.autoscale.scrape_source import ScrapeSource

pytestmark = pytest.mark.timeout(300)
JOB = 'job="shoal-engines"'


def test_the_engine_exports_its_batch_limit_next_to_its_running_count(scraped_fleet: ScrapedFleet) -> None:
    page = httpx.get(f"{scraped_fleet.engines[0].url}/metrics", timeout=10).text
    lines = [line for line in page.splitlines() if line.startswith("shoal_engine_max_num_seqs{")]
    assert lines == ['shoal_engine_max_num_seqs{model="tiny-llama"} 1.0'], lines  # the fixture's --max-num-seqs 1


async def test_a_full_batch_is_occupancy_one_from_the_scrape_and_from_prometheus(scraped_fleet: ScrapedFleet) -> None:
    async def scraped() -> FleetSignals:
        async with httpx.AsyncClient() as client:
            return await ScrapeSource(client).observe(time.time(), 2, scraped_fleet.targets())

    async def queried() -> FleetSignals:
        async with httpx.AsyncClient() as client:
            source = PrometheusSource(client, scraped_fleet.prometheus.url, JOB, timeout_seconds=10)
            return await source.observe(time.time(), 2, scraped_fleet.targets())

    idle = await scraped()
    assert [r.max_num_seqs for r in idle.replicas] == [1.0, 1.0]
    assert fleet_load(idle).occupancy == 0.0
    full_scraped = full_queried = None
    deadline = time.monotonic() + 120
    # Clients resend as each request ends, so engine-0's one slot stays taken for as long as the sources need to
    # see it: a fixed burst could end before Prometheus's first scrapes of a just-started fleet read it.
    with Resending(scraped_fleet, 0, clients=4, max_tokens=64) as load:
        while time.monotonic() < deadline and not load.failures and (full_scraped is None or full_queried is None):
            signals = await scraped()
            if signals.replicas[0].running == 1.0:
                full_scraped = signals
            signals = await queried()
            if signals.missing is None and signals.replicas[0].running == 1.0:
                full_queried = signals
            await asyncio.sleep(0.2)
    assert not load.failures, load.failures
    for signals in (full_scraped, full_queried):
        assert signals is not None, "a running request on an engine of batch limit 1 must show in both sources"
        assert [r.max_num_seqs for r in signals.replicas] == [1.0, 1.0]
        # engine-0's batch is full, engine-1's empty: the fleet is half occupied
        assert fleet_load(signals).occupancy == pytest.approx(0.5)

    def drained() -> bool:  # the next tests share this fleet and expect Prometheus to see it idle
        return asyncio.run(queried()).replicas[0].waiting == 0.0

    await asyncio.get_running_loop().run_in_executor(None, lambda: eventually(drained, 30, "an idle engine-0"))
