"""The request path's upstream client against scripted raw HTTP servers: reuse, stale connections, framing,
backpressure and failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from shoal.gateway.upstream import UpstreamConnectError, UpstreamError, UpstreamPool
from shoal.local import free_port

pytestmark = pytest.mark.timeout(30)

Script = Callable[[asyncio.StreamWriter], Awaitable[bool]]  # answers one request; False closes the connection


class RawServer:
    """Answers each request on a connection with ``script``; counts connections and requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                self.requests.append(head + await reader.readexactly(length))
                if not await self.script(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Script], Awaitable[tuple[RawServer, str]]]]:
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> tuple[RawServer, str]:
        raw = RawServer(script)
        port = free_port()
        servers.append(await asyncio.start_server(raw.handle, "127.0.0.1", port))
        return raw, f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.close()


OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"ok": true}'


async def test_connections_are_kept_alive_and_reused(serve) -> None:
    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(OK)
        return True

    raw, url = await serve(answer)
    pool = UpstreamPool()
    for i in range(5):
        response = await pool.post(url, "/v1/completions", b'{"i": %d}' % i, {"X-Request-Id": f"r{i}"})
        assert response.status == 200 and response.headers["content-type"] == "application/json"
        assert await response.read_all() == b'{"ok": true}'
        response.release()
    assert raw.connections == 1 and len(raw.requests) == 5
    assert raw.requests[3].startswith(b"POST /v1/completions HTTP/1.1\r\n")
    assert b"X-Request-Id: r3\r\n" in raw.requests[3] and raw.requests[3].endswith(b'{"i": 3}')
    pool.close()


async def test_a_connection_the_server_closed_while_idle_is_replaced_transparently(serve) -> None:
    """Keep-alive promised, then closed after each answer (as an engine's idle timeout does)."""

    async def answer_then_close(writer: asyncio.StreamWriter) -> bool:
        writer.write(OK)
        await writer.drain()
        return False

    raw, url = await serve(answer_then_close)
    pool = UpstreamPool()
    for _ in range(3):
        response = await pool.post(url, "/x", b"{}", {})
        assert await response.read_all() == b'{"ok": true}'
        response.release()
        await asyncio.sleep(0.05)  # let the close arrive, or not: either way the next request must succeed
    assert raw.connections == 3 and len(raw.requests) == 3
    pool.close()


async def test_a_connection_idle_too_long_is_not_reused(serve) -> None:
    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(OK)
        return True

    raw, url = await serve(answer)
    pool = UpstreamPool(idle_timeout_s=0.05)
    for _ in range(2):
        response = await pool.post(url, "/x", b"{}", {})
        await response.read_all()
        response.release()
        await asyncio.sleep(0.1)
    assert raw.connections == 2
    pool.close()


async def test_chunked_and_eof_delimited_bodies_arrive_whole(serve) -> None:
    async def chunked(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in (b"data: 1\n\n", b"data: 2\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        return True

    async def until_eof(writer: asyncio.StreamWriter) -> bool:
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"a": 1}')
        return False

    for script, body in ((chunked, b"data: 1\n\ndata: 2\n\n"), (until_eof, b'{"a": 1}')):
        _, url = await serve(script)
        pool = UpstreamPool()
        response = await pool.post(url, "/x", b"{}", {})
        assert await response.read_all() == body and response.at_end
        response.release()
        pool.close()


async def test_a_response_cut_short_or_not_http_is_an_error(serve) -> None:
    async def cut_short(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        return False

    async def garbage(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"\x00\xffnot http at all\r\n\r\n")
        return False

    _, url = await serve(cut_short)
    pool = UpstreamPool()
    response = await pool.post(url, "/x", b"{}", {})
    assert await response.read() == b"partial"
    with pytest.raises(UpstreamError, match="before the response was complete"):
        await response.read()
    _, url = await serve(garbage)
    with pytest.raises(UpstreamError, match="not valid HTTP"):
        await pool.post(url, "/x", b"{}", {})
    pool.close()


async def test_a_refused_connection_is_a_connect_error() -> None:
    pool = UpstreamPool(connect_timeout_s=1)
    with pytest.raises(UpstreamConnectError, match="cannot connect"):
        await pool.post(f"http://127.0.0.1:{free_port()}", "/x", b"{}", {})


async def test_an_unread_body_past_the_high_water_mark_stops_reading_the_socket(serve) -> None:
    """A slow client holds the engine back through TCP instead of growing the gateway's buffers."""
    sent = 0
    big = 32 * 1024 * 1024  # beyond what loopback socket buffers absorb (tcp_rmem + tcp_wmem maxima)
    stalled = asyncio.Event()

    async def flood(writer: asyncio.StreamWriter) -> bool:
        nonlocal sent
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % big)
        block = b"x" * 65536
        while sent < big:
            writer.write(block)
            try:
                await asyncio.wait_for(writer.drain(), 0.5)
            except TimeoutError:
                stalled.set()
                await writer.drain()
            sent += len(block)
        return True

    _, url = await serve(flood)
    pool = UpstreamPool()
    response = await pool.post(url, "/x", b"{}", {})
    await asyncio.wait_for(stalled.wait(), 10)  # the server could not get rid of the whole body
    assert sent < big
    assert len(await response.read_all()) == big  # and reading resumes it to the end
    response.release()
    pool.close()
