"""Real engines failing under load behind the gateway: killed outright (SIGKILL) or wedged (SIGSTOP). In-flight
streams end with an error event rather than hanging past their limit, new requests route around the dead
replica, and a wedged engine's requests are closed so that it frees their KV blocks once it runs again."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import pytest
from support.polling import eventually

from shoal.local import metric

pytestmark = pytest.mark.timeout(300)

LIMITS = {"first_token_timeout_s": 20.0, "inter_token_timeout_s": 2.0, "request_timeout_s": 120.0}
LONG = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 1500, "stream": True, "ignore_eos": True}


def stream_outcome(url: str, outcomes: list[tuple[str, float]], first_byte: threading.Event) -> None:
    """Reads one long stream to its end: 'done', or the code of the error event that ended it, and when."""
    try:
        with httpx.stream("POST", url + "/v1/completions", json=LONG, timeout=60) as response:
            for line in response.iter_lines():
                first_byte.set()
                if line.startswith("data: {") and '"error"' in line:
                    outcomes.append((json.loads(line[6:])["error"]["code"], time.monotonic()))
                    return
        outcomes.append(("done", time.monotonic()))
    except httpx.HTTPError as exc:
        outcomes.append((f"transport: {exc!r}", time.monotonic()))


def start_streams(url: str, count: int) -> tuple[list[threading.Thread], list[tuple[str, float]]]:
    outcomes: list[tuple[str, float]] = []
    started = [threading.Event() for _ in range(count)]
    threads = [
        threading.Thread(target=stream_outcome, args=(url, outcomes, started[i]), daemon=True) for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for event in started:
        assert event.wait(60), "a stream never started"
    return threads, outcomes


def test_an_engine_killed_under_load(start_engines, gateway_over, tiny_model) -> None:
    doomed, survivor = start_engines(2, "--num-kv-blocks", "512")
    handle = gateway_over(
        [doomed.url, survivor.url],
        byte_tokenized=(),
        tokenizers={"tiny": str(tiny_model)},
        policy="round-robin",
        **LIMITS,
    )
    handle.wait_healthy(2)
    _, outcomes = start_streams(handle.url, 8)  # round-robin: 4 on each
    killed_at = time.monotonic()
    os.kill(doomed.process.pid, signal.SIGKILL)
    eventually(lambda: len(outcomes) >= 4, 30, "the killed engine's streams to end")
    assert [code for code, _ in outcomes] == ["upstream_error"] * 4  # the survivor's still stream
    assert max(at for _, at in outcomes) - killed_at < 10  # none hung until a timeout
    for _ in range(6):  # new requests go to the survivor, without an error
        response = httpx.post(
            handle.url + "/v1/completions", json={**LONG, "stream": False, "max_tokens": 4}, timeout=60
        )
        assert response.status_code == 200
    assert not handle.gateway.fleet.replicas[doomed.url].healthy


def test_a_wedged_engine_is_cut_off_and_frees_its_blocks(start_engines, gateway_over, tiny_model) -> None:
    (engine,) = start_engines(1, "--num-kv-blocks", "512")
    handle = gateway_over([engine.url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model)}, **LIMITS)
    handle.wait_healthy(1)
    threads, outcomes = start_streams(handle.url, 3)
    os.kill(engine.process.pid, signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        for thread in threads:
            thread.join(timeout=LIMITS["inter_token_timeout_s"] + 15)
        assert [code for code, _ in outcomes] == ["inter_token_timeout"] * 3
        assert max(at for _, at in outcomes) - stopped_at < LIMITS["inter_token_timeout_s"] + 10
    finally:
        os.kill(engine.process.pid, signal.SIGCONT)
    eventually(
        lambda: (
            metric(engine.url, "shoal_engine_requests_running") == 0
            and metric(engine.url, "shoal_engine_kv_cache_usage_ratio") == 0
        ),
        60,
        "the engine to abort the requests the gateway closed and free their blocks",
    )
