"""Fans the engine's KV-cache events out to every ``/kv/events`` follower.

A follower must be able to rebuild exactly the set of block hashes this replica holds. So its snapshot and
the events after it are cut at one point of the engine's history: the step thread (the only thread that
touches the engine) publishes pending events, takes the snapshot and registers the follower in one go, and
publishes later events from the same thread. Each follower numbers its own stream from 0 (the snapshot) up
by one per event. A follower's queue is bounded: one that falls too far behind is cut off (its stream ends)
and reconnects for a fresh snapshot rather than holding memory or missing events silently.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

from shoal.protocol.kv_events import KVEvent

_CLOSED = None


class Follower:
    """One connected follower: an asyncio queue filled from the step thread via the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.loop = loop
        self._queue: asyncio.Queue[KVEvent | None] = asyncio.Queue(maxsize=limit)
        self._next_seq = 0
        self.closed = False

    def push(self, events: list[KVEvent]) -> None:
        """Runs on the loop: renumbers and enqueues events, or cuts the follower off when it lags."""
        for event in events:
            if self.closed:
                return
            if self._queue.full():
                self.close()
                return
            self._queue.put_nowait(event.model_copy(update={"seq": self._next_seq}))
            self._next_seq += 1

    def close(self) -> None:
        """Ends the stream (runs on the loop)."""
        if self.closed:
            return
        self.closed = True
        while self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(_CLOSED)

    async def events(self) -> AsyncIterator[KVEvent]:
        while (event := await self._queue.get()) is not _CLOSED:
            yield event


class KVEventHub:
    """Followers of this replica's cache; ``publish`` and ``attach`` are called from the step thread."""

    def __init__(self, block_size: int, engine_id: str, follower_queue_limit: int = 4096) -> None:
        self.block_size = block_size
        self.engine_id = engine_id
        self.follower_queue_limit = follower_queue_limit
        self._followers: set[Follower] = set()
        self._lock = threading.Lock()

    def attach(self, follower: Follower, snapshot: list[int]) -> None:
        """Registers a follower whose stream starts with ``snapshot`` (step thread)."""
        event = KVEvent(type="snapshot", seq=0, hashes=snapshot, block_size=self.block_size, engine_id=self.engine_id)
        follower.loop.call_soon_threadsafe(follower.push, [event])
        with self._lock:
            self._followers.add(follower)

    def detach(self, follower: Follower) -> None:
        with self._lock:
            self._followers.discard(follower)

    def publish(self, events: list[KVEvent]) -> None:
        """Sends the engine's new events to every follower, in order (step thread)."""
        if not events:
            return
        with self._lock:
            followers = list(self._followers)
        for follower in followers:
            follower.loop.call_soon_threadsafe(follower.push, events)

    def close_all(self) -> None:
        """Ends every stream (on shutdown, so that uvicorn is not kept waiting by endless responses)."""
        with self._lock:
            followers = list(self._followers)
            self._followers.clear()
        for follower in followers:
            follower.loop.call_soon_threadsafe(follower.close)
