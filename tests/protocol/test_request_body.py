"""The body reader and validator the engine and the gateway share: capped, drained or not, refusing clearly."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from shoal.protocol.errors import APIError
from shoal.protocol.json_body import ClientDisconnected, parse_json_object, read_body, validated
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest

LIMIT = 100


def asgi_body(*chunks: bytes, disconnect: bool = False) -> tuple[Callable[[], Awaitable[Mapping[str, Any]]], list[int]]:
    """An ASGI ``receive`` that delivers ``chunks`` as request messages, and the count of messages it gave out."""
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1 or disconnect}
        for i, chunk in enumerate(chunks)
    ]
    if disconnect:
        messages.append({"type": "http.disconnect"})
    taken = [0]

    async def receive() -> Mapping[str, Any]:
        taken[0] += 1
        return messages[taken[0] - 1]

    return receive, taken


def read(
    receive: Callable[[], Awaitable[Mapping[str, Any]]], declared: bytes | None = None, drain_limit: int | None = None
) -> bytes:
    return asyncio.run(read_body(receive, declared, LIMIT, drain_limit))


def test_a_body_in_chunks_within_the_limit_is_read_whole() -> None:
    receive, _ = asgi_body(b'{"a": ', b"1", b"}")
    assert parse_json_object(read(receive, b"8")) == {"a": 1}


@pytest.mark.parametrize("drain_limit", [None, 10 * LIMIT])
def test_a_declared_length_past_where_reading_stops_is_refused_unread(drain_limit: int | None) -> None:
    receive, taken = asgi_body(b"x")
    with pytest.raises(APIError) as refused:
        read(receive, str((drain_limit or LIMIT) + 1).encode(), drain_limit)
    assert refused.value.status_code == 413 and refused.value.code == "request_too_large"
    assert taken[0] == 0


def test_without_draining_reading_stops_at_the_first_chunk_past_the_limit() -> None:
    receive, taken = asgi_body(*[b"y" * 40] * 10)
    with pytest.raises(APIError, match=f"limit of {LIMIT} bytes") as refused:
        read(receive)
    assert refused.value.status_code == 413 and taken[0] == 3


def test_draining_reads_the_rest_then_refuses_and_stops_at_the_drain_limit() -> None:
    receive, taken = asgi_body(*[b"y" * 40] * 10)
    with pytest.raises(APIError) as refused:
        read(receive, drain_limit=10 * LIMIT)
    assert refused.value.status_code == 413 and taken[0] == 10  # all of it read, so its sender reads the answer
    receive, taken = asgi_body(*[b"y" * 40] * 10)
    with pytest.raises(APIError):
        read(receive, drain_limit=2 * LIMIT)
    assert taken[0] == 6  # 240 bytes is past 200


def test_a_client_that_leaves_mid_body_is_a_disconnect_not_a_request() -> None:
    receive, _ = asgi_body(b'{"model": ', disconnect=True)
    with pytest.raises(ClientDisconnected):
        read(receive)


def test_validation_names_the_bad_field_with_a_400() -> None:
    assert validated(CompletionRequest, {"model": "m", "prompt": "hi"}).prompts() == ["hi"]
    with pytest.raises(APIError) as refused:
        validated(ChatCompletionRequest, {"model": "m", "messages": [], "max_tokens": 3})
    assert refused.value.status_code == 400 and refused.value.param == "messages"
