"""A TCP relay in the test's own event loop whose connections a test can cut, to break a long-lived stream
(a watch, an SSE response) the way a dying peer or a network fault does: mid-response, with no clean end."""

from __future__ import annotations

import asyncio
import contextlib


class CuttableRelay:
    """Relays ``127.0.0.1:<port>`` to ``target``; ``cut()`` aborts every connection open through it."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> CuttableRelay:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        self._writers |= {client_writer, upstream_writer}
        await asyncio.gather(self._copy(client_reader, upstream_writer), self._copy(upstream_reader, client_writer))

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
        self._writers.discard(writer)

    def cut(self) -> int:
        """Aborts every open connection (RST, no clean close); returns how many were open."""
        writers, self._writers = self._writers, set()
        for writer in writers:
            writer.transport.abort()
        return len(writers) // 2

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
