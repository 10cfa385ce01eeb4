"""The gateway's time limits: connect, first token, between tokens and the whole request, each answered so a
client can act on it (another replica or a 504 before the first byte; an error event after it), and each one
closing the upstream so the engine stops working for nobody."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.polling import eventually

from shoal.gateway.timeouts import Deadline, client_limit

pytestmark = pytest.mark.timeout(60)

STREAM = {"model": "tiny", "prompt": "hello", "max_tokens": 8, "stream": True}
TIMEOUTS = {"first_token_timeout_s": 2.0, "inter_token_timeout_s": 1.0, "request_timeout_s": 20.0}  # loaded CI


def error_events(response: httpx.Response) -> list[dict]:
    events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    return [event["error"] for event in events if "error" in event]


@given(
    now=st.floats(0, 1e4),
    limit=st.floats(0.01, 1e3),
    first=st.floats(0.01, 1e3),
    gap=st.floats(0.01, 1e3),
    elapsed=st.floats(0, 2e3),
    stream=st.booleans(),
)
def test_a_wait_never_outlasts_the_request_and_names_the_limit_that_binds(
    now: float, limit: float, first: float, gap: float, elapsed: float, stream: bool
) -> None:
    deadline = Deadline.starting(now, limit, first, gap)
    later = now + elapsed
    for wait, own in (
        (deadline.first_byte(later, stream), first if stream else None),
        (deadline.next_chunk(later), gap),
    ):
        assert wait.seconds <= deadline.end - later
        if wait.code == "request_timeout":
            assert own is None or own >= deadline.end - later
        else:
            assert wait.seconds == own < deadline.end - later


def test_a_client_may_shorten_its_limit_never_lengthen_it() -> None:
    assert client_limit(None, 600.0) == 600.0
    assert client_limit(b"2.5", 600.0) == 2.5
    assert client_limit(b"3600", 600.0) == 600.0
    for bad in (b"0", b"-1", b"soon", b"nan", b"inf"):
        with pytest.raises(ValueError, match="X-Request-Timeout"):
            client_limit(bad, 600.0)


def test_a_replica_silent_before_its_first_token_is_left_for_another(fake_engines, gateways) -> None:
    (stalled, stalled_server), (good, good_server) = fake_engines(2)
    stalled.mode = "stall"
    handle = gateways([stalled_server.url, good_server.url], policy="round-robin", **TIMEOUTS)
    handle.wait_healthy(2)
    for _ in range(2):  # round-robin: one or both (as the replicas' ids sort) land on the stalled replica first
        with httpx.stream("POST", handle.url + "/v1/completions", json=STREAM, timeout=10) as response:
            assert response.status_code == 200
            assert error_events(response) == []

    def first_token_timeouts() -> float:
        for line in httpx.get(handle.url + "/metrics").text.splitlines():
            if line.startswith('shoal_gateway_upstream_timeouts_total{limit="first_token_timeout"}'):
                return float(line.split()[-1])
        return 0.0

    eventually(
        lambda: stalled.disconnects >= 1 and first_token_timeouts() == stalled.disconnects,
        10,
        "each request the stalled replica held closed, and counted",
    )
    assert good.completed == 2
    assert all(r.healthy for r in handle.gateway.fleet.replicas.values())  # slow is not dead: not ejected


def test_no_first_token_anywhere_is_a_504_naming_the_limit(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.mode = "stall"
    handle = gateways([server.url], **TIMEOUTS)
    handle.wait_healthy(1)
    client = openai.OpenAI(base_url=handle.url + "/v1", api_key="none", max_retries=0)
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as raised:
        client.completions.create(model="tiny", prompt="hello", max_tokens=4, stream=True)
    assert time.monotonic() - started < 10
    assert raised.value.status_code == 504
    assert raised.value.body["code"] == "first_token_timeout"
    eventually(lambda: engine.disconnects == 1, 10, "the engine saw its request closed")


def test_a_stream_that_falls_silent_ends_with_an_error_event_and_a_closed_upstream(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.tokens, engine.token_delay = 5, 5.0
    handle = gateways([server.url], **TIMEOUTS)
    handle.wait_healthy(1)
    started = time.monotonic()
    with httpx.stream("POST", handle.url + "/v1/completions", json=STREAM, timeout=10) as response:
        assert response.status_code == 200
        errors = error_events(response)
    assert time.monotonic() - started < 4.5
    assert [e["code"] for e in errors] == ["inter_token_timeout"]
    eventually(lambda: engine.disconnects == 1, 10, "the engine saw its stream closed")


def test_the_clients_own_limit_cuts_a_stream_short(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.tokens, engine.token_delay = 60, 0.1
    handle = gateways([server.url], **TIMEOUTS)
    handle.wait_healthy(1)
    with httpx.stream(
        "POST", handle.url + "/v1/completions", json=STREAM, timeout=10, headers={"X-Request-Timeout": "2.5"}
    ) as response:
        errors = error_events(response)
    assert [e["code"] for e in errors] == ["request_timeout"]
    assert "2.5 s" in errors[0]["message"]
    eventually(lambda: engine.disconnects == 1, 10, "the engine saw its stream closed")


def test_a_non_streaming_request_is_bounded_by_the_request_limit(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.mode = "stall"
    handle = gateways([server.url], **{**TIMEOUTS, "request_timeout_s": 1.5})
    handle.wait_healthy(1)
    response = httpx.post(
        handle.url + "/v1/completions",
        json={"model": "tiny", "prompt": "hi"},
        timeout=10,
        headers={"X-Request-Timeout": "30"},
    )  # asks for more than the server allows
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "request_timeout"
    eventually(lambda: engine.disconnects == 1, 10, "the engine saw its request closed")


def test_a_malformed_client_limit_is_a_400_naming_the_header(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    handle = gateways([server.url])
    handle.wait_healthy(1)
    response = httpx.post(
        handle.url + "/v1/completions", json={"model": "tiny", "prompt": "hi"}, headers={"X-Request-Timeout": "later"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "X-Request-Timeout"
    assert engine.requests == []
