"""A client that leaves while still sending its body is a departure, not a server error, and costs nothing."""

from __future__ import annotations

import socket
import uuid

import httpx
from serve_harness import TINY_MODEL_NAME, ServeProcess
from support.polling import eventually


def test_a_client_leaving_mid_body_is_logged_as_gone_and_others_are_served(server: ServeProcess) -> None:
    request_id = f"left-{uuid.uuid4().hex[:8]}"
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"X-Request-Id: {request_id}\r\nContent-Length: 1000\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + b'{"model": "' + TINY_MODEL_NAME.encode())
    eventually(
        lambda: f"[{request_id}] the client left before its body was complete" in server.log(200_000),
        60,
        "the engine to log the departure",
        detail=lambda: server.log(),
    )
    assert f"unhandled error in request {request_id}" not in server.log(200_000)
    done = httpx.post(
        f"{server.url}/v1/completions", json={"model": TINY_MODEL_NAME, "prompt": "hi", "max_tokens": 2}, timeout=60
    )
    assert done.status_code == 200
