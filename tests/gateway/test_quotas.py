"""Tenant quotas: the pure rule, and both stores (in memory, and a real redis-server shared by two gateways)."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.gateway.auth import ApiKeys
from shoal.gateway.quota import Limits, MemoryQuota, QuotaStore, Usage, decide, window_of
from shoal.gateway.quota_redis import RedisQuota
from shoal.local import free_port

pytestmark = pytest.mark.timeout(60)

limits_st = st.builds(
    Limits, st.none() | st.integers(0, 5), st.none() | st.integers(0, 500), st.none() | st.integers(0, 3)
)


@given(
    limits_st,
    st.builds(Usage, st.integers(0, 6), st.integers(0, 600), st.integers(0, 4)),
    st.integers(1, 200),
    st.floats(0, 1e9),
)
def test_a_request_passes_exactly_when_it_fits_every_limit(limits: Limits, usage: Usage, cost: int, now: float) -> None:
    verdict = decide(limits, usage, cost, now)
    fits = (
        (limits.max_concurrent is None or usage.concurrent < limits.max_concurrent)
        and (limits.requests_per_minute is None or usage.requests < limits.requests_per_minute)
        and (limits.tokens_per_minute is None or usage.tokens + cost <= limits.tokens_per_minute)
    )
    assert verdict.allowed == fits
    if not fits:
        assert 0 < verdict.retry_after <= 60 and 1 <= int(verdict.retry_after_header) <= 60


@pytest.fixture(autouse=True)
def clear_of_the_window_edge() -> None:
    """Rate windows are clock minutes: start a test with enough of the minute left that it cannot roll over."""
    remaining = window_of(time.time())[1]
    if remaining < 10:
        time.sleep(remaining + 0.05)


async def exercise(store: QuotaStore, tenant: str) -> None:
    """The same script for both stores: rates, tokens, concurrency and release."""
    limits = Limits(requests_per_minute=3, tokens_per_minute=100, max_concurrent=2)
    first = await store.admit(tenant, limits, 40)
    second = await store.admit(tenant, limits, 40)
    assert first.allowed and second.allowed
    blocked = await store.admit(tenant, limits, 10)
    assert (blocked.allowed, blocked.limit) == (False, "max_concurrent")
    await store.release(first)
    over_tokens = await store.admit(tenant, limits, 30)
    assert (over_tokens.allowed, over_tokens.limit) == (False, "tokens_per_minute")
    third = await store.admit(tenant, limits, 20)
    assert third.allowed
    await store.release(second)
    await store.release(third)
    over_rate = await store.admit(tenant, limits, 1)
    assert (over_rate.allowed, over_rate.limit) == (False, "requests_per_minute")
    other = await store.admit(tenant + "-other", limits, 100)
    assert other.allowed


async def test_memory_store_enforces_every_limit() -> None:
    await exercise(MemoryQuota(), "acme")


async def test_redis_store_enforces_every_limit(redis_server) -> None:
    store = RedisQuota(redis_server.url, prefix=f"test:{uuid.uuid4().hex}")
    try:
        await exercise(store, "acme")
    finally:
        await store.close()


async def test_redis_admits_exactly_the_limit_under_concurrent_gateways(redis_server) -> None:
    prefix = f"test:{uuid.uuid4().hex}"
    stores = [RedisQuota(redis_server.url, prefix=prefix) for _ in range(2)]
    try:
        limits = Limits(requests_per_minute=25)
        verdicts = await asyncio.gather(*(stores[i % 2].admit("acme", limits, 1) for i in range(60)))
        assert sum(v.allowed for v in verdicts) == 25
    finally:
        for store in stores:
            await store.close()


async def test_an_unreachable_redis_admits_rather_than_failing_requests() -> None:
    store = RedisQuota(f"redis://127.0.0.1:{free_port()}/0", prefix="test:down")
    try:
        admission = await store.admit("acme", Limits(requests_per_minute=0), 10)
        assert admission.allowed
        await store.release(admission)
    finally:
        await store.close()


def test_two_gateways_share_one_tenant_quota_through_redis(fake_engines, gateways, redis_server) -> None:
    ((_, server),) = fake_engines(1)
    keys = ApiKeys({"acme": (["sk-acme"], Limits(requests_per_minute=3))})
    prefix = f"test:{uuid.uuid4().hex}"
    pair = [gateways([server.url], api_keys=keys, quota=RedisQuota(redis_server.url, prefix=prefix)) for _ in range(2)]
    for handle in pair:
        handle.wait_healthy(1)
    statuses = [
        httpx.post(
            pair[i % 2].url + "/v1/completions",
            json={"model": "tiny", "prompt": "x"},
            headers={"Authorization": "Bearer sk-acme"},
        ).status_code
        for i in range(5)
    ]
    assert statuses == [200, 200, 200, 429, 429]
