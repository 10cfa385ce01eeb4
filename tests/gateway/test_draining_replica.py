"""A replica that drains refuses new work with a 503 and an OpenAI-style body, and so the requests queued on it
that have not started; the gateway re-routes what it refused to another replica before any byte reached the
client, and the draining replica's own in-flight request still finishes whole. Real ``shoal serve`` engines with the real SmolLM2 model, the official ``openai`` client."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from gateway_harness import EngineProcess, GatewayHandle
from support.polling import eventually
from support.stream_load import tokens_for_seconds

from shoal.local.metrics import metric_values

pytestmark = pytest.mark.timeout(600)

MODEL = "smollm2"
# the long request (ignore_eos): LONG_SECONDS at a lone request's rate, sized once the engines are up, so the
# engine stays draining while the test sends on any CPU (400 fixed tokens were a few seconds on a fast one)
LONG_SECONDS, MIN_LONG, MAX_LONG = 15.0, 400, 1900


@pytest.fixture
def two_engines(tmp_path: Path) -> Iterator[list[EngineProcess]]:
    started = [
        EngineProcess("smollm2-135m", tmp_path / f"engine-{i}.log", MODEL, "--max-model-len", "2048", *grace)
        for i, grace in enumerate((["--shutdown-grace", "120", "--max-num-seqs", "1"], []))
    ]
    try:
        yield [engine.wait_ready(timeout=300) for engine in started]
    finally:
        for engine in started:
            engine.stop()


@dataclass
class Pair:
    """Two engines behind a gateway: ``draining`` (one sequence at a time, so a second request waits; a grace of
    120 s) and another; clients through the gateway (``api``) and straight to ``draining`` (``direct``)."""

    draining: EngineProcess
    handle: GatewayHandle
    api: openai.OpenAI
    direct: openai.OpenAI
    long_tokens: int  # the long request's length: LONG_SECONDS at the draining engine's lone rate


@pytest.fixture
def pair(two_engines: list[EngineProcess], gateways: Callable[..., GatewayHandle]) -> Pair:
    draining, other = two_engines
    # Round-robin sends every other request to the draining replica; no health check in the test's window
    # stands for the time a cluster takes to drop a terminating pod from its EndpointSlices.
    handle = gateways(
        [draining.url, other.url],
        byte_tokenized=(),
        tokenizers={MODEL: "smollm2-135m"},
        policy="round-robin",
        health_interval_s=3600,
    )
    handle.wait_healthy(2, timeout=60)
    api = openai.OpenAI(base_url=f"{handle.url}/v1", api_key="unused", max_retries=0, timeout=120)
    direct = openai.OpenAI(base_url=f"{draining.url}/v1", api_key="unused", max_retries=0, timeout=300)
    return Pair(
        draining, handle, api, direct, tokens_for_seconds(draining.url, MODEL, LONG_SECONDS, MIN_LONG, MAX_LONG)
    )


def test_requests_refused_by_a_draining_replica_are_served_by_another(pair: Pair) -> None:
    draining, handle, api, direct = pair.draining, pair.handle, pair.api, pair.direct
    in_flight, runner = _long_request(direct, draining.url, pair.long_tokens)
    draining.terminate()
    eventually(lambda: httpx.get(draining.url + "/ready", timeout=5).status_code == 503, 30, "the engine draining")

    refused = httpx.post(
        f"{draining.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=30,
    )
    assert refused.status_code == 503 and refused.headers["retry-after"]
    assert refused.json()["error"]["type"] and refused.json()["error"]["message"]

    replies = [
        api.chat.completions.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": f"hi {i}"}])
        for i in range(6)
    ]
    assert all(r.choices[0].finish_reason in ("stop", "length") for r in replies)
    rejected = metric_values(draining.url, "shoal_engine_requests_rejected_total")
    assert sum(v for labels, v in rejected.items() if 'reason="draining"' in labels) >= 3 + 1  # 3 routed + direct
    retries = metric_values(handle.url, "shoal_gateway_upstream_retries_total")
    assert sum(v for labels, v in retries.items() if 'cause="unavailable"' in labels) >= 3

    _assert_whole(in_flight, runner, pair.long_tokens)
    assert draining.process.wait(timeout=60) == 0


def test_a_request_queued_on_a_draining_replica_is_served_by_another(pair: Pair) -> None:
    draining, handle, api, direct = pair.draining, pair.handle, pair.api, pair.direct
    in_flight, runner = _long_request(direct, draining.url, pair.long_tokens)

    streams = [_stream(api, 8) for _ in range(2)]  # round-robin: one of them waits on the draining replica
    eventually(lambda: _waiting(draining.url) >= 1, 60, "a request queued behind the long one")
    draining.terminate()
    for chunks, thread in streams:
        _assert_whole(chunks, thread, 8)
    assert runner.is_alive(), "the queued request was served after the long one, not re-routed"
    rejected = metric_values(draining.url, "shoal_engine_requests_rejected_total")
    assert sum(v for labels, v in rejected.items() if 'reason="draining"' in labels) == 1
    retries = metric_values(handle.url, "shoal_gateway_upstream_retries_total")
    assert sum(v for labels, v in retries.items() if 'cause="unavailable"' in labels) == 1
    _assert_whole(in_flight, runner, pair.long_tokens)
    assert draining.process.wait(timeout=60) == 0


def _stream(api: openai.OpenAI, tokens: int, url: str | None = None) -> tuple[list[Any], threading.Thread]:
    """A streaming chat of exactly ``tokens`` tokens (``ignore_eos``) in a thread; its chunks land in the list."""
    chunks: list[Any] = []

    def run() -> None:
        chunks.extend(
            api.chat.completions.create(
                model=MODEL,
                max_tokens=tokens,
                messages=[{"role": "user", "content": "Tell me about the sea."}],
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return chunks, thread


def _long_request(direct: openai.OpenAI, url: str, tokens: int) -> tuple[list[Any], threading.Thread]:
    """A long stream straight to the engine at ``url``, running once this returns."""
    chunks, thread = _stream(direct, tokens)
    eventually(lambda: chunks or _running(url) >= 1, 60, "the long request running")
    return chunks, thread


def _assert_whole(chunks: list[Any], thread: threading.Thread, tokens: int) -> None:
    """The stream ended with finish_reason ``length`` after all its tokens, and its usage chunk."""
    thread.join(timeout=300)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"] and chunks[-1].usage.completion_tokens == tokens, chunks[-2:]


def _running(url: str) -> float:
    return sum(metric_values(url, "shoal_engine_requests_running").values())


def _waiting(url: str) -> float:
    return sum(metric_values(url, "shoal_engine_requests_waiting").values())
