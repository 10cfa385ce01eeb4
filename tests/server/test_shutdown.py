"""SIGTERM drains: not ready, new requests 503, in-flight ones finish within the grace period or are aborted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from serve_harness import ServeProcess, metric, wait_for

pytestmark = pytest.mark.timeout(180)


def test_sigterm_drains_then_exits(tmp_path: Path, tiny_model_dir: Path) -> None:
    server = ServeProcess(tiny_model_dir, tmp_path / "serve.log", "--max-num-seqs", "1", "--shutdown-grace", "1")
    try:
        server.wait_ready()
        results: dict[int, httpx.Response] = {}

        def send(i: int, max_tokens: int) -> None:
            body = {"model": server.model_name, "prompt": f"drain {i}", "max_tokens": max_tokens, "ignore_eos": True}
            results[i] = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)

        # one short request runs first; four long ones queue behind it (one sequence at a time), far more
        # work than the 1 s grace period allows
        threads = [threading.Thread(target=send, args=(0, 4))]
        threads += [threading.Thread(target=send, args=(i, 240)) for i in range(1, 5)]
        for t in threads:
            t.start()
            time.sleep(0.05)
        in_engine = lambda: metric(server.url, "shoal_engine_requests_running") + metric(server.url, "shoal_engine_requests_waiting")  # noqa: E731
        assert wait_for(lambda: in_engine() >= 4)  # the short one may be done already
        server.terminate()
        time.sleep(0.2)
        assert httpx.get(f"{server.url}/ready").status_code == 503, server.log()
        refused = httpx.post(f"{server.url}/v1/completions", json={"model": server.model_name, "prompt": "late"})
        assert refused.status_code == 503 and refused.headers["retry-after"]
        for t in threads:
            t.join(timeout=60)
        assert server.process.wait(timeout=30) == 0
        assert all(r.status_code == 200 for r in results.values())
        reasons = [results[i].json()["choices"][0]["finish_reason"] for i in range(5)]
        assert reasons[0] == "length"
        assert "abort" in reasons[1:]
    finally:
        server.stop()
