"""A real engine publishes its start-up by phase on ``/metrics``, and the first token it served."""

from __future__ import annotations

import time

import httpx
import pytest
from serve_harness import ServeProcess

from shoal.engine.server.startup_metrics import process_age
from shoal.local.startup import ENGINE_PHASES, parse_engine_startup

pytestmark = pytest.mark.timeout(120)


def test_the_phases_add_up_to_the_process_age_at_ready(server: ServeProcess) -> None:
    started = parse_engine_startup(httpx.get(f"{server.url}/metrics").text)
    assert set(started.phases) == set(ENGINE_PHASES)
    assert all(seconds >= 0 for seconds in started.phases.values())
    assert started.phases["loading"] > 0 and started.phases["warming"] > 0 and started.phases["imports"] > 0
    assert started.ready is not None and started.ready <= time.time()
    age_at_ready = process_age(server.process.pid) - (time.time() - started.ready)
    assert sum(started.phases.values()) == pytest.approx(age_at_ready, abs=0.05)  # /proc counts 10 ms ticks


def test_the_first_token_is_stamped_once_and_after_ready(server: ServeProcess) -> None:
    body = {"model": server.model_name, "prompt": "x", "max_tokens": 2}
    httpx.post(f"{server.url}/v1/completions", json=body).raise_for_status()
    first = parse_engine_startup(httpx.get(f"{server.url}/metrics").text)
    assert first.ready is not None and first.first_token is not None
    assert first.ready <= first.first_token <= time.time()
    httpx.post(f"{server.url}/v1/completions", json=body).raise_for_status()
    assert parse_engine_startup(httpx.get(f"{server.url}/metrics").text).first_token == first.first_token
