"""TcpRelay: a proxy hop that does nothing but copy bytes, for the overhead benchmark's floor.

Each client connection gets a connection of its own to the next backend (round-robin) and bytes are copied
both ways as they arrive (uvloop, no parsing, no buffering beyond the kernel's). Whatever a request gains
going through it is what one more process hop costs on this machine (two more socket copies, one more wakeup
per event); what a router adds beyond the relay is its own work.

    .venv/bin/python bench/tcp_relay.py --port 9100 --backend http://127.0.0.1:9001 --backend http://127.0.0.1:9002
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from collections.abc import Iterator
from urllib.parse import urlsplit

import uvloop


class _Side(asyncio.Protocol):
    """One end of a relayed pair: what it receives is written to its peer (held until the peer connects)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.held: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None
        if self.peer.transport is None:
            self.held.append(data)
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _ClientSide(_Side):
    def __init__(self, backends: Iterator[tuple[str, int]]) -> None:
        super().__init__()
        self.backends = backends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peer = _Side()
        self.peer.peer = self
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        assert self.peer is not None and self.transport is not None
        host, port = next(self.backends)
        try:
            upstream, _ = await asyncio.get_running_loop().create_connection(lambda: self.peer, host, port)
        except OSError:
            self.transport.close()
            return
        for data in self.held:
            upstream.write(data)
        self.held.clear()


async def serve(port: int, backends: list[str]) -> None:
    addresses = [(parts.hostname or "127.0.0.1", parts.port or 80) for parts in map(urlsplit, backends)]
    cycle = itertools.cycle(addresses)
    server = await asyncio.get_running_loop().create_server(lambda: _ClientSide(cycle), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", action="append", required=True, metavar="URL")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.backend))


if __name__ == "__main__":
    main()
