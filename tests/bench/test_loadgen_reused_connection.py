"""``shoal bench serve``'s client against a server that closes a kept-alive connection as it is reused (llama-server
does, and a benchmark counted that against it): the request that met the closed connection is sent once more on a
new one and counted as retried, not failed; a server that closes every connection unanswered still fails each
request, after one retry. The servers are raw asyncio sockets, so the close comes exactly where the test puts it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from shoal.loadgen.datasets import BenchRequest
from shoal.loadgen.report import format_summary, summarize
from shoal.loadgen.runner import BenchConfig, run_benchmark

STREAM = (
    b"data: " + json.dumps({"choices": [{"text": "hi"}]}).encode() + b"\n\n"
    b"data: "
    + json.dumps({"choices": [{"text": "!"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()
    + b"\n\ndata: [DONE]\n\n"
)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    found = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    await reader.readexactly(int(found.group(1)) if found else 0)


async def answer_once_then_close_on_reuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers a connection's first request (keep-alive, as HTTP/1.1 defaults), then closes it without a word when
    the next request arrives on it."""
    await _read_request(reader)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(STREAM) + STREAM
    )
    await writer.drain()
    with contextlib.suppress(asyncio.IncompleteReadError):  # or the client went away first
        await reader.readuntil(b"\r\n\r\n")
    writer.close()


async def close_unanswered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.close()


@contextlib.asynccontextmanager
async def _serve(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("handler", "completed", "retried", "error"),
    [(answer_once_then_close_on_reuse, 4, 3, ""), (close_unanswered, 0, 4, "RemoteProtocolError")],
)
async def test_a_connection_closed_as_it_is_reused_is_sent_again_once(
    handler: Handler, completed: int, retried: int, error: str
) -> None:
    async with _serve(handler) as url:
        config = BenchConfig(url=url, model="m", concurrency=1, progress=False)
        results, duration = await run_benchmark(config, [BenchRequest("a b c", 2) for _ in range(4)])
    summary = summarize(results, duration)
    assert (summary["completed"], summary["failed"], summary["retried"]) == (completed, 4 - completed, retried)
    assert all(r.retries <= 1 for r in results)
    if completed:
        assert all(r.output_tokens == 2 and r.ttft > 0 and len(r.itls) == 1 for r in results)
        assert "(3 sent again on a new connection)" in format_summary(summary)
    else:
        assert all(r.error.startswith(error) and r.retries == 1 for r in results)
