"""Where the engine replicas are: a static list of URLs, or a file of them that may change.

A discovery source is an async callable that keeps calling ``publish(urls)`` with the full current set;
``shoal.gateway.kube_discovery`` is the Kubernetes one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger(__name__)

Publish = Callable[[list[str]], None]
Discovery = Callable[[Publish], Awaitable[None]]


def static(urls: list[str]) -> Discovery:
    async def run(publish: Publish) -> None:
        publish(list(urls))

    return run


def read_urls(path: Path) -> list[str]:
    """One URL per line; blank lines and ``#`` comments are skipped."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def from_file(path: str | Path, interval: float = 2.0) -> Discovery:
    """Re-reads the file whenever it changes (a ConfigMap mount is replaced atomically)."""
    file = Path(path)

    async def run(publish: Publish) -> None:
        seen: float | None = None
        while True:
            try:
                mtime = file.stat().st_mtime
                if mtime != seen:
                    publish(read_urls(file))
                    seen = mtime
            except OSError as exc:
                log.warning("backends file %s unreadable: %s", file, exc)
            await asyncio.sleep(interval)

    return run
