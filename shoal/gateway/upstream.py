"""Pooled keep-alive HTTP/1.1 connections to the engine replicas: the gateway's request path upstream.

An asyncio protocol over httptools' response parser rather than a general-purpose client, because this path is
most of what the gateway costs per request: the request goes out in one write, body chunks are handed over as
they arrive (joined when several are waiting, so a slow reader costs fewer writes), and nothing runs per request
but the parser. Connections are kept per replica, newest first, and dropped after ``idle_timeout_s`` idle, under
uvicorn's default keep-alive of 5 s, so an engine rarely closes one under us. When it does (a reused connection
that ends before any byte of the response), the request is sent once more on a fresh connection: the engine
closed it idle, so it never started the request.

Reading pauses once ``high_water`` bytes of body wait unread, so a slow client holds the engine back through TCP
instead of filling the gateway's memory.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

import httptools

HIGH_WATER_BYTES = 256 * 1024


class UpstreamError(Exception):
    """The exchange with the replica failed: the connection broke, or the response is not HTTP."""


class UpstreamConnectError(UpstreamError):
    """No connection could be opened to the replica."""


class UpstreamTimeout(UpstreamError):
    """The replica sent nothing within the time allowed (the exchange is still open; the caller closes it)."""


class UpstreamResponse:
    """One exchange on one connection: its status and headers, then its body as chunks are read."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._headers_done = False
        self._complete = False
        self._keep_alive = False
        self._eof_delimited = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.received_any = False

    @property
    def at_end(self) -> bool:
        """Complete, and every body byte already read: the next ``read`` would answer ``b""``."""
        return self._complete and not self._chunks

    async def wait_headers(self, deadline: float | None = None) -> None:
        """Until the status line and headers are in, by ``deadline`` (``time.monotonic()``) if one is given."""
        while not self._headers_done:
            await self._wait(None if deadline is None else deadline - time.monotonic())

    async def read(self, timeout: float | None = None) -> bytes:
        """Every body byte that has arrived since the last read (waiting up to ``timeout`` seconds for some,
        else ``UpstreamTimeout``); ``b""`` once complete."""
        while not self._chunks:
            if self._complete:
                return b""
            await self._wait(timeout)
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        if self._buffered >= HIGH_WATER_BYTES:
            self._connection.resume_reading()
        self._buffered = 0
        return data

    async def read_all(self, deadline: float | None = None) -> bytes:
        """The rest of the body, all of it by ``deadline`` (``time.monotonic()``) if one is given."""
        parts = []
        while chunk := await self.read(None if deadline is None else deadline - time.monotonic()):
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Done with the exchange: a complete keep-alive one returns its connection to the pool, else it closes."""
        if self._complete and self._keep_alive and self._error is None:
            self._connection.back_to_pool()
        else:
            self._connection.close()

    def close(self) -> None:
        """Abandons the exchange and its connection (the engine sees the disconnect and aborts the request)."""
        self._connection.close()

    async def _wait(self, timeout: float | None) -> None:
        """Until the parser has news; a timer only while actually waiting, so chunks already in cost none."""
        if self._error is not None:
            raise self._error
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(max(0.0, timeout), _expire, waiter, timeout)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def feed(self, data: bytes) -> None:
        self.received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(UpstreamError(f"the replica's response is not valid HTTP/1.1: {exc}"))
            self._connection.close()

    def fail(self, error: UpstreamError) -> None:
        if not self._complete and self._error is None:
            self._error = error
            self._wake()

    def ended(self) -> None:
        """The connection closed: the end of an EOF-delimited body, or a failure."""
        if self._eof_delimited and self._headers_done:
            self._complete = True
            self._wake()
        else:
            self.fail(UpstreamError("the replica closed the connection before the response was complete"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        framed = "content-length" in self.headers or "transfer-encoding" in self.headers
        self._eof_delimited = not framed and self.status not in (204, 304) and self.status >= 200
        self._headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered >= HIGH_WATER_BYTES:
            self._connection.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self._wake()


def _expire(waiter: asyncio.Future[None], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(UpstreamTimeout(f"nothing from the replica in {timeout:.3g} s"))


class _Connection(asyncio.Protocol):
    def __init__(self, pool: UpstreamPool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.response: UpstreamResponse | None = None
        self.closed = False
        self.idle_since = 0.0

    def send(self, request: bytes) -> UpstreamResponse:
        assert self.transport is not None
        self.response = UpstreamResponse(self)
        self.transport.write(request)
        return self.response

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.response is None:  # bytes on an idle connection: nothing can be trusted on it now
            self.close()
            return
        self.response.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response.ended()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def back_to_pool(self) -> None:
        self.response = None
        self.pool.put(self)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class UpstreamPool:
    """Keep-alive connections per replica address, shared by every request."""

    def __init__(self, connect_timeout_s: float = 2.0, idle_timeout_s: float = 4.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._addresses: dict[str, tuple[str, int]] = {}

    async def post(
        self, url: str, path: str, body: bytes, headers: Mapping[str, str], deadline: float | None = None
    ) -> UpstreamResponse:
        """Sends ``POST url+path`` and returns once the response's status and headers are in (by ``deadline``,
        a ``time.monotonic()`` instant, else ``UpstreamTimeout``)."""
        key = self._address(url)
        request = _encode_post(key, path, body, headers)
        connection = self._take_idle(key)
        if connection is not None:
            response = connection.send(request)
            try:
                await response.wait_headers(deadline)
                return response
            except UpstreamTimeout:
                connection.close()
                raise
            except UpstreamError:
                connection.close()
                if response.received_any:
                    raise
            except BaseException:
                connection.close()
                raise
        connection = await self._connect(key)
        response = connection.send(request)
        try:
            await response.wait_headers(deadline)
        except BaseException:
            connection.close()
            raise
        return response

    def put(self, connection: _Connection) -> None:
        if connection.closed:
            return
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.key, []).append(connection)

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _take_idle(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        fresh_after = time.monotonic() - self.idle_timeout_s
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since > fresh_after:
                return connection
            connection.close()
        return None

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self, key), key[0], key[1]), self.connect_timeout_s
            )
        except (TimeoutError, OSError) as exc:
            raise UpstreamConnectError(f"cannot connect to {key[0]}:{key[1]}: {exc or 'timed out'}") from None
        return connection

    def _address(self, url: str) -> tuple[str, int]:
        key = self._addresses.get(url)
        if key is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise UpstreamConnectError(f"replica URL {url!r} is not http://HOST[:PORT]")
            key = self._addresses[url] = (parts.hostname, parts.port or 80)
        return key


def _encode_post(key: tuple[str, int], path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
    host = key[0] if key[1] == 80 else f"{key[0]}:{key[1]}"
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
