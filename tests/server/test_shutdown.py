"""SIGTERM drains: not ready, new requests and waiting ones that have not started 503, running ones finish within
the grace period or are aborted; a second SIGTERM ends the grace period at once (what streams is aborted, each
response whole)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from serve_harness import ServeProcess, build_tiny_model, wait_for

from shoal.protocol.prom_text import samples_named

pytestmark = pytest.mark.timeout(180)

# Requests that must finish within the grace period are short enough to finish well within it, yet long enough
# (1,800 tokens: seconds of decode) that the four of them are not all done between two polls of the test's check
# (240 tokens took under half a second once the CPU attention kernel came, and a full run once lost that race);
# those that must still be running when SIGTERM arrives are longer still, so no machine finishes one between the
# test seeing it in flight and the signal landing.
SHORT_CONTEXT, SHORT_MAX_TOKENS = 2048, 1800
LONG_CONTEXT, LONG_MAX_TOKENS = 8192, 8000


@pytest.mark.parametrize(
    ("grace", "signals", "expected", "context", "max_tokens"),
    [
        ("120", 1, "length", SHORT_CONTEXT, SHORT_MAX_TOKENS),
        ("0", 1, "abort", LONG_CONTEXT, LONG_MAX_TOKENS),
        ("600", 2, "abort", LONG_CONTEXT, LONG_MAX_TOKENS),
    ],
    ids=["in-flight-requests-finish-within-grace", "grace-over-aborts-the-rest", "second-sigterm-ends-the-grace"],
)
def test_sigterm_drains_then_exits(
    tmp_path: Path, grace: str, signals: int, expected: str, context: int, max_tokens: int
) -> None:
    model = build_tiny_model(tmp_path / "model", context=context)
    server = ServeProcess(model, tmp_path / "serve.log", "--max-num-seqs", "2", "--shutdown-grace", grace)
    try:
        server.wait_ready()
        results: dict[int, httpx.Response] = {}

        def send(i: int) -> None:
            body = {"model": server.model_name, "prompt": f"drain {i}", "max_tokens": max_tokens, "ignore_eos": True}
            results[i] = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]  # two run, two wait (and are refused)
        for t in threads:
            t.start()

        def admitted_and_some_in_flight() -> bool:
            # one scrape for the three series: read one by one, a request finishing between the reads counts twice
            page = httpx.get(f"{server.url}/metrics", timeout=10).text
            running, waiting, finished = (
                sum(value for _, value in samples_named(page, name))
                for name in (
                    "shoal_engine_requests_running",
                    "shoal_engine_requests_waiting",
                    "shoal_engine_requests_finished_total",
                )
            )
            return running + waiting > 0 and running + waiting + finished == 4

        # a wait, not a timing: on a loaded machine four requests can take more than 10 s to reach the engine
        assert wait_for(admitted_and_some_in_flight, timeout_s=60.0)
        server.terminate()
        if grace != "0":
            assert wait_for(lambda: httpx.get(f"{server.url}/ready").status_code == 503)
            refused = httpx.post(f"{server.url}/v1/completions", json={"model": server.model_name, "prompt": "late"})
            assert refused.status_code == 503 and refused.headers["retry-after"]
        if signals == 2:  # 8,000 tokens a request: minutes of decode, far from done when the grace ends
            server.terminate()
        for t in threads:
            t.join(timeout=60)
        assert server.process.wait(timeout=30) == 0
        assert sorted(results) == [0, 1, 2, 3]
        served = [r for r in results.values() if r.status_code == 200]
        refused = [r for r in results.values() if r.status_code != 200]  # waiting, not started: for a gateway to retry
        assert served, "the running requests finish (or are aborted) with their response"
        assert [r.json()["choices"][0]["finish_reason"] for r in served] == [expected] * len(served)
        assert all(r.status_code == 503 and r.headers["retry-after"] for r in refused)
        assert all(r.json()["error"]["code"] == "service_unavailable" for r in refused)
    finally:
        server.stop()


def test_unknown_model_fails_fast(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "missing", tmp_path / "serve.log")
    try:
        assert server.process.wait(timeout=60) == 2
        assert "missing" in server.log()
    finally:
        server.stop()


def test_model_that_fails_to_load_stops_the_server(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The port opens first (alive while loading); a load failure then ends the process with status 1."""
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((tiny_model_dir / name).read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    server = ServeProcess(broken, tmp_path / "serve.log")
    try:
        assert server.process.wait(timeout=120) == 1
        assert "the model failed to load" in server.log()
    finally:
        server.stop()
