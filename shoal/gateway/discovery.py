"""Where the engine replicas are: a static list of URLs, or a file of them that may change.

A discovery source is an async callable that keeps calling ``publish(backends)`` with the full current set;
``shoal.gateway.kube_discovery`` is the Kubernetes one. A backend is its base URL and, for an engine that
publishes its KV cache over ZMQ (vLLM), that publisher's port on the same host: in a backends file, a line
``URL kv-events=PORT``; on Kubernetes, the engine Service's port named ``kv-events``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from shoal.engine_kinds.vllm import KV_EVENTS_PORT_NAME

log = logging.getLogger(__name__)

KV_EVENTS_KEY = KV_EVENTS_PORT_NAME  # the backends file's key and the Service's port name alike


@dataclass(frozen=True, order=True)
class Backend:
    """One engine replica as discovery finds it."""

    url: str
    kv_events_port: int | None = None  # its ZMQ KV-event publisher (vLLM's), on the URL's host

    def line(self) -> str:
        """As a backends file writes it."""
        return self.url if self.kv_events_port is None else f"{self.url} {KV_EVENTS_KEY}={self.kv_events_port}"


Publish = Callable[[list[Backend]], None]
Discovery = Callable[[Publish], Awaitable[None]]


def static(lines: list[str]) -> Discovery:
    """Backends given once, each as a backends file's line (``--backend``)."""
    backends = [parse_line(line) for line in lines]

    async def run(publish: Publish) -> None:
        publish(list(backends))

    return run


def parse_line(line: str) -> Backend:
    """``URL`` or ``URL kv-events=PORT``; anything else is a ``ValueError`` naming the line."""
    url, *options = line.split()
    port: int | None = None
    for option in options:
        key, sep, value = option.partition("=")
        if key != KV_EVENTS_KEY or not sep or not value.isdigit() or not 0 < int(value) < 65536:
            raise ValueError(f"backend {line!r}: expected URL [{KV_EVENTS_KEY}=PORT], PORT in 1-65535")
        port = int(value)
    return Backend(url, port)


def read_backends(path: Path) -> list[Backend]:
    """One backend a line; blank lines and ``#`` comments are skipped."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [parse_line(line) for line in lines if line]


FILE_POLL_S = 0.25  # one stat() per poll: a new ready replica is routed within this, not within seconds


def from_file(path: str | Path, interval: float = FILE_POLL_S) -> Discovery:
    """Re-reads the file whenever it changes (a ConfigMap mount is replaced atomically)."""
    file = Path(path)

    async def run(publish: Publish) -> None:
        seen: float | None = None
        while True:
            try:
                mtime = file.stat().st_mtime
                if mtime != seen:
                    publish(read_backends(file))
                    seen = mtime
            except (OSError, ValueError) as exc:
                log.warning("backends file %s unreadable: %s", file, exc)
            await asyncio.sleep(interval)

    return run
