"""Follows one engine's ``GET /kv/events`` stream into that replica's ``PrefixIndex``.

The stream opens with a snapshot and continues with stored/removed events; on a sequence gap, a disconnect or
an engine restart the index falls back to the routing history and the follower reconnects for a new snapshot.
An engine that hashes blocks with another scheme than the gateway computes is not followed at all: its hashes
would never match and would only look like misses. The snapshot's block size is the replica's
(``Replica.block_size``): the gateway hashes prompts for it with that size (``shoal.gateway.block_size``).
Reconnects back off with ``shoal.protocol.backoff`` (reset by each snapshot).

The SSE parsing stays hand-written: the stream is the engine's own and uses only ``data:`` lines (one JSON event
each, no ``event``/``id``/``retry`` fields), which ``sse_data_lines`` reads with a bound on line length; the
maintained SSE client on offer here (httpx-sse) wraps httpx, while the followers share the gateway's aiohttp session.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import aiohttp
from pydantic import ValidationError

from shoal.gateway.prefix_index import EventGap
from shoal.gateway.replicas import Replica
from shoal.protocol.backoff import Backoff, Retry
from shoal.protocol.block_hash import BLOCK_HASH_SCHEME
from shoal.protocol.kv_events import KVEvent

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
RECONNECT = Backoff(initial_s=0.5, cap_s=10.0, jitter=0.2)  # jittered: a restarted engine's gateways spread out


class IncompatibleHashes(Exception):
    """The engine names its blocks with a scheme the gateway does not compute."""


async def sse_data_lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of a server-sent event stream, however the bytes are chunked."""
    buffer = bytearray()
    async for chunk in content.iter_any():
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[: end + 1]
            if line.startswith(b"data:"):
                yield line[5:].strip()
        if len(buffer) > MAX_LINE_BYTES:
            raise ValueError(f"an event line is longer than {MAX_LINE_BYTES} bytes")


def _refuse_foreign_hashes(event: KVEvent) -> None:
    if event.hash_scheme != BLOCK_HASH_SCHEME:
        raise IncompatibleHashes(f"engine hashes with {event.hash_scheme!r}, the gateway with {BLOCK_HASH_SCHEME!r}")


async def follow(
    session: aiohttp.ClientSession,
    replica: Replica,
    on_sync: Callable[[Replica, bool], None],
    backoff: Backoff = RECONNECT,
) -> None:
    """Runs until cancelled, keeping ``replica.index`` in step with the engine; backs off while it fails."""
    timeout = aiohttp.ClientTimeout(total=None, connect=2.0, sock_read=None)
    retry = Retry(backoff)
    while True:
        try:
            async with session.get(replica.url + "/kv/events", timeout=timeout) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                async for data in sse_data_lines(response.content):
                    event = KVEvent.model_validate_json(data)
                    _refuse_foreign_hashes(event)
                    replica.index.apply(event)
                    if event.type == "snapshot":
                        replica.block_size = event.block_size or replica.block_size
                        on_sync(replica, True)
                        retry.succeeded()
        except IncompatibleHashes as exc:
            log.error("not following %s/kv/events: %s", replica.url, exc)
            replica.index.desync()
            on_sync(replica, False)
            return
        except (TimeoutError, EventGap, ValidationError, ValueError, aiohttp.ClientError) as exc:
            log.info("kv events from %s interrupted (%s); resyncing", replica.url, exc)
        replica.index.desync()
        on_sync(replica, False)
        await retry.failed()
