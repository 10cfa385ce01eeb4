"""A client that goes away aborts its request: its KV blocks are freed and the abort is counted."""

from __future__ import annotations

import random

import httpx
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess, wait_for

from shoal.local import metric

pytestmark = pytest.mark.timeout(180)
M = TINY_MODEL_NAME


def _settled(url: str) -> bool:
    return metric(url, "shoal_engine_requests_running") == 0 and metric(url, "shoal_engine_requests_waiting") == 0


def test_fifty_streams_cancelled_at_random_points_free_every_block(server: ServeProcess) -> None:
    rng = random.Random(50)
    aborted_before = metric(server.url, "shoal_engine_requests_aborted_total")
    with httpx.Client(timeout=60) as http:
        for i in range(50):
            body = {
                "model": M,
                "prompt": f"Request {i}: once upon a time",
                "max_tokens": 200,
                "stream": True,
                "ignore_eos": True,
            }
            cut_after = rng.randint(0, 12)  # SSE lines read before hanging up (0: right after the headers)
            with http.stream("POST", f"{server.url}/v1/completions", json=body) as r:
                assert r.status_code == 200
                for n, _ in enumerate(r.iter_lines()):
                    if n >= cut_after:
                        break
    assert wait_for(lambda: _settled(server.url)), server.log()
    assert wait_for(lambda: metric(server.url, "shoal_engine_requests_aborted_total") - aborted_before == 50)
    assert metric(server.url, "shoal_engine_kv_cache_usage_ratio") == 0
    assert metric(server.url, "shoal_engine_kv_cache_free_blocks") == metric(
        server.url, "shoal_engine_kv_cache_total_blocks"
    )


def test_non_streaming_client_that_gives_up_aborts_its_request(server: ServeProcess) -> None:
    aborted_before = metric(server.url, "shoal_engine_requests_aborted_total")
    body = {"model": M, "prompt": "a long story", "max_tokens": 240, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/completions", json=body, timeout=httpx.Timeout(60, read=0.05))
    assert wait_for(lambda: metric(server.url, "shoal_engine_requests_aborted_total") == aborted_before + 1)
    assert wait_for(lambda: _settled(server.url))
    assert metric(server.url, "shoal_engine_kv_cache_usage_ratio") == 0
    assert '"status": "cancelled"' in server.log()
