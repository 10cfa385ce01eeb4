"""Redis, the shared quota store, goes down under a gateway and comes back: requests are admitted unmetered
(fail open, the default) or refused with a 503 (fail closed), the outage is a log line and a metric, and
metering resumes by itself once Redis is back."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.services import start_redis

from shoal.gateway.auth import ApiKeys
from shoal.gateway.quota import Limits, window_of
from shoal.gateway.quota_redis import RedisQuota
from shoal.local import metric_values

pytestmark = pytest.mark.timeout(120)

BODY = {"model": "tiny", "prompt": "hi", "max_tokens": 4}
ROOM_SECONDS = 15.0  # far more than three requests to a fake engine take, even on a loaded machine


def in_one_window(burst: Callable[[], list[int]]) -> list[int]:
    """``burst()`` inside one quota minute: the count is per fixed window, so a burst across a boundary would
    start over midway. With under ``ROOM_SECONDS`` left, the next window is waited for (at most that long)."""
    left = window_of(time.time())[1]
    if left < ROOM_SECONDS:
        time.sleep(left + 0.05)
    window = window_of(time.time())[0]
    results = burst()
    assert window_of(time.time())[0] == window, f"the burst took over {ROOM_SECONDS:.0f} s"
    return results


@pytest.mark.parametrize("fail_open", [True, False], ids=["fail-open", "fail-closed"])
def test_redis_down_and_back(fake_engine, gateway_over, tmp_path: Path, caplog, fail_open: bool) -> None:
    _, server = fake_engine
    redis = start_redis(tmp_path / "redis")
    keys = ApiKeys({"acme": (["sk-acme"], Limits(requests_per_minute=2))})
    handle = gateway_over(
        [server.url], api_keys=keys, quota=RedisQuota(redis.url, prefix=f"test:{uuid.uuid4().hex}", fail_open=fail_open)
    )
    handle.wait_healthy(1)

    def send() -> int:
        return httpx.post(
            handle.url + "/v1/completions", json=BODY, headers={"Authorization": "Bearer sk-acme"}, timeout=30
        ).status_code

    try:
        with caplog.at_level(logging.WARNING, logger="shoal.gateway.quota_redis"):
            assert in_one_window(lambda: [send(), send(), send()]) == [200, 200, 429]  # metered
            redis.stop()
            down = [send() for _ in range(3)]
            assert down == ([200] * 3 if fail_open else [503] * 3)
            outcome = "admitted" if fail_open else "refused"
            errors = metric_values(handle.url, "shoal_gateway_quota_store_errors_total")
            assert errors == {f'{{outcome="{outcome}"}}': 3.0}
            redis = start_redis(tmp_path / "redis", port=redis.port)
            # metered again (a fresh Redis: a fresh count)
            assert in_one_window(lambda: [send(), send(), send()]) == [200, 200, 429]
    finally:
        redis.stop()
    messages = [record.getMessage() for record in caplog.records]
    assert sum("quota store unreachable" in m for m in messages) == 1  # once per outage, not per request
    assert sum("quota store reachable again" in m for m in messages) == 1
