"""Scale from zero at the gateway: a request for a model with no ready replica is held (bounded in number and
time), counted in ``shoal_gateway_requests_held``, and served in arrival order once a replica is ready; past
the limits it gets a 503 with ``Retry-After``; a client that leaves while held costs nothing. The queue itself
runs on a real event loop; the end-to-end tests run a real gateway and a real ``shoal serve`` engine."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from gateway_harness import GatewayHandle, make_gateway
from prometheus_client import CollectorRegistry, Gauge
from support.polling import eventually

from shoal.gateway.discovery import from_file
from shoal.gateway.hold_queue import HoldQueue
from shoal.local import metric, metric_values
from shoal.protocol.errors import APIError


def _queue(size: int = 8, wait_s: float = 5.0) -> tuple[HoldQueue, Gauge]:
    gauge = Gauge("held", "held", ["model"], registry=CollectorRegistry())
    return HoldQueue(size, wait_s, 7, gauge), gauge


def _held(gauge: Gauge, model: str = "m") -> float:
    return gauge.labels(model)._value.get()


def test_held_requests_resume_in_arrival_order() -> None:
    queue, gauge = _queue()
    ready = False
    order: list[int] = []

    async def request(i: int) -> None:
        await queue.wait("m", lambda: ready)
        order.append(i)

    async def main() -> None:
        nonlocal ready
        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(request(i)))
            await asyncio.sleep(0)  # arrive one after the other
        await asyncio.sleep(0.01)
        assert _held(gauge) == 5 and order == []
        queue.release(lambda model: False)  # another model got a replica: nothing moves
        await asyncio.sleep(0.01)
        assert order == []
        ready = True
        queue.release(lambda model: model == "m")
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == [0, 1, 2, 3, 4]
    assert _held(gauge) == 0 and queue.held == 0


def test_past_the_size_or_the_wait_it_is_a_503_with_retry_after() -> None:
    queue, gauge = _queue(size=1, wait_s=0.2)

    async def main() -> tuple[APIError, APIError]:
        first = asyncio.create_task(queue.wait("m", lambda: False))
        await asyncio.sleep(0.01)
        with pytest.raises(APIError) as full:
            await queue.wait("m", lambda: False)
        with pytest.raises(APIError) as timed_out:
            await first
        return full.value, timed_out.value

    full, timed_out = asyncio.run(main())
    assert full.status_code == 503 and full.headers["Retry-After"] == "7"
    assert "1 requests are already held" in full.body()["error"]["message"]
    assert timed_out.status_code == 503 and "within 0.2s" in timed_out.body()["error"]["message"]
    assert _held(gauge) == 0 and queue.held == 0


def test_size_zero_answers_at_once_and_a_cancelled_wait_leaves_no_trace() -> None:
    off, _ = _queue(size=0)
    queue, gauge = _queue()

    async def main() -> None:
        with pytest.raises(APIError, match="No healthy backend"):
            await off.wait("m", lambda: False)
        waiter = asyncio.create_task(queue.wait("m", lambda: False))
        await asyncio.sleep(0.01)
        assert _held(gauge) == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert _held(gauge) == 0 and queue.held == 0
        queue.release(lambda model: True)  # nothing left to wake, nothing raised

    asyncio.run(main())


@pytest.fixture
def empty_fleet_gateway(tmp_path: Path) -> Iterator[tuple[GatewayHandle, Path]]:
    """A real gateway holding up to 3 requests for 30 s, following a backends file that starts empty."""
    backends = tmp_path / "backends"
    backends.write_text("")
    gateway = make_gateway([], hold_queue_size=3, hold_seconds=30.0, tokenizers={})
    gateway.discovery = from_file(backends, interval=0.1)
    handle = GatewayHandle(gateway)
    yield handle, backends
    handle.stop()


def _complete(url: str, results: dict[int, str], i: int) -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    results[i] = client.completions.create(model="tiny", prompt=f"hello {i}", max_tokens=4).choices[0].text


def test_a_request_at_zero_replicas_is_held_then_served(
    empty_fleet_gateway: tuple[GatewayHandle, Path], engines: list
) -> None:
    handle, backends = empty_fleet_gateway
    engine = engines[0]
    finished_before = metric(engine.url, "shoal_engine_requests_finished_total")

    # a client that gives up while held: it leaves the queue and never reaches an engine
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(handle.url + "/v1/completions", json={"model": "tiny", "prompt": "bye"}, timeout=0.5)
    eventually(lambda: metric(handle.url, "shoal_gateway_requests_held") == 0, 10, "the departed client unheld")

    results: dict[int, str] = {}
    clients = [threading.Thread(target=_complete, args=(handle.url, results, i)) for i in range(3)]
    for client in clients:
        client.start()
    eventually(
        lambda: metric_values(handle.url, "shoal_gateway_requests_held") == {'{model="tiny"}': 3.0},
        20,
        "three requests held for `tiny`",
    )
    refused = httpx.post(handle.url + "/v1/completions", json={"model": "tiny", "prompt": "x"}, timeout=10)
    assert refused.status_code == 503 and refused.headers["Retry-After"].isdigit()
    assert "already held" in refused.json()["error"]["message"]

    backends.write_text(engine.url + "\n")  # a replica becomes ready
    for client in clients:
        client.join(60)
    assert sorted(results) == [0, 1, 2] and all(isinstance(text, str) for text in results.values())
    assert metric(handle.url, "shoal_gateway_requests_held") == 0
    assert metric(engine.url, "shoal_engine_requests_finished_total") == finished_before + 3
