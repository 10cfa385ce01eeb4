"""A full waiting queue answers 503 with Retry-After; a request over its time limit ends with ``abort``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_harness import ServeProcess, wait_for

from shoal.local import metric, metric_values

pytestmark = pytest.mark.timeout(120)
LONG = 4000  # tokens: seconds of decoding even for the tiny model on an idle machine, against a 0.3 s limit


def _long(server: ServeProcess) -> httpx.Response:
    body = {"model": server.model_name, "prompt": "go on and on", "max_tokens": LONG, "ignore_eos": True}
    return httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)


def test_full_queue_gets_503_and_admitted_requests_time_out(constrained_server: ServeProcess) -> None:
    """One may run and two may wait; each may generate for 0.3 s, far less than LONG tokens take."""
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: _long(constrained_server), range(8)))
    refused = [r for r in responses if r.status_code == 503]
    served = [r for r in responses if r.status_code == 200]
    assert len(refused) + len(served) == 8
    assert refused and served
    assert all(r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "service_unavailable" for r in refused)
    for r in served:
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "abort"
        assert r.json()["usage"]["completion_tokens"] < LONG
    rejected = metric_values(constrained_server.url, "shoal_engine_requests_rejected_total")
    assert sum(v for k, v in rejected.items() if 'reason="queue_full"' in k) == len(refused)
    assert '"status": "timeout"' in constrained_server.log()
    assert wait_for(lambda: metric(constrained_server.url, "shoal_engine_kv_cache_usage_ratio") == 0)
