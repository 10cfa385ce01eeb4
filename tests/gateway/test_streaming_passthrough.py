"""SSE passthrough without buffering, request ids and stage timings, cancellation, failures before/after byte one."""

from __future__ import annotations

import json
import logging
import socket
import time

import httpx
import pytest
from support.polling import eventually

pytestmark = pytest.mark.timeout(60)

STREAM = {"model": "tiny", "prompt": "hello", "max_tokens": 8, "stream": True}


def test_chunks_reach_the_client_as_the_backend_sends_them(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.tokens, engine.token_delay = 4, 0.3
    handle = gateways([server.url])
    handle.wait_healthy(1)
    arrivals = []
    with httpx.stream("POST", handle.url + "/v1/completions", json=STREAM, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"  # an nginx in front passes each chunk on at once
        for line in response.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.monotonic())
    assert len(arrivals) == 4
    assert arrivals[-1] - arrivals[0] > 0.6  # spread as sent (0.9 s), not all at once at the end


def test_request_id_reaches_the_engine_and_stage_timings_come_back(fake_engines, gateways, caplog) -> None:
    ((engine, server),) = fake_engines(1)
    handle = gateways([server.url])
    handle.wait_healthy(1)
    with caplog.at_level(logging.INFO, logger="shoal.gateway.access"):
        response = httpx.post(
            handle.url + "/v1/completions", json={"model": "tiny", "prompt": "hi"}, headers={"X-Request-Id": "req-42"}
        )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "req-42"
    assert engine.requests[-1]["headers"]["x-request-id"] == "req-42"
    assert "authorization" not in engine.requests[-1]["headers"]
    stages = [part.split(";")[0] for part in response.headers["server-timing"].split(", ")]
    assert stages == ["auth", "validate", "tokenize", "quota", "route", "upstream", "ttfb"]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "shoal.gateway.access"]
    line = next(entry for entry in lines if entry.get("request_id") == "req-42")
    assert line["status"] == 200 and line["backend"] == server.url and line["route_reason"] == "miss"
    assert set(line["stages_ms"]) == set(stages)


def test_a_client_that_leaves_mid_stream_closes_the_upstream(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.tokens, engine.token_delay = 100, 0.05
    handle = gateways([server.url])
    handle.wait_healthy(1)
    with httpx.stream("POST", handle.url + "/v1/completions", json=STREAM, timeout=10) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                break
    eventually(lambda: engine.disconnects == 1, 5, "the engine to see the disconnect")
    replica = handle.gateway.fleet.replicas[server.url]
    eventually(lambda: replica.in_flight == 0 and replica.load_tokens == 0, 5, "the lease to be released")
    assert engine.completed == 0


def test_a_client_that_leaves_before_the_first_byte_closes_the_upstream(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.mode = "stall"
    handle = gateways([server.url])
    handle.wait_healthy(1)
    body = json.dumps({"model": "tiny", "prompt": "x"}).encode()
    with socket.create_connection(("127.0.0.1", handle.server.port)) as client:
        client.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        eventually(lambda: len(engine.requests) == 1, 10, "the request to reach the engine")
    eventually(lambda: engine.disconnects == 1, 10, "the engine to see the disconnect")
    eventually(lambda: 'status="499"' in httpx.get(handle.url + "/metrics").text, 10, "the 499 to be counted")


def test_refused_connections_are_retried_on_another_replica_and_the_dead_one_ejected(fake_engines, gateways) -> None:
    (_, dead_server), (live, live_server) = fake_engines(2)
    handle = gateways([dead_server.url, live_server.url], policy="round-robin", health_interval_s=30)
    handle.wait_healthy(2)
    dead_server.stop()
    for _ in range(3):
        response = httpx.post(handle.url + "/v1/completions", json={"model": "tiny", "prompt": "x"})
        assert response.status_code == 200
    assert live.completed == 3
    assert not handle.gateway.fleet.replicas[dead_server.url].healthy
    assert 'shoal_gateway_upstream_retries_total{cause="connect"} 1.0' in httpx.get(handle.url + "/metrics").text


def test_a_backend_dying_mid_stream_ends_the_stream_with_an_error_event(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.tokens, engine.token_delay = 50, 0.05
    handle = gateways([server.url])
    handle.wait_healthy(1)
    events = []
    with httpx.stream("POST", handle.url + "/v1/completions", json=STREAM, timeout=10) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 2:
                    server.server.force_exit = True
                    server.stop()
    assert response.status_code == 200
    assert json.loads(events[-1])["error"]["code"] == "upstream_error"
    assert "[DONE]" not in events


def test_health_checks_bring_a_replica_back(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    handle = gateways([server.url])
    handle.wait_healthy(1)
    engine.ready = False
    handle.wait_healthy(0)
    assert httpx.post(handle.url + "/v1/completions", json={"model": "tiny", "prompt": "x"}).status_code == 503
    engine.ready = True
    handle.wait_healthy(1)
    assert httpx.post(handle.url + "/v1/completions", json={"model": "tiny", "prompt": "x"}).status_code == 200
