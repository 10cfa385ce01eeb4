"""What one engine replica has in its prefix cache, as far as the gateway knows. Pure data, no I/O.

Three sources, in order of trust. The engine's ``/kv/events`` stream (a snapshot, then stored/removed events
with consecutive sequence numbers) is exact while it is in sync. The prefixes of requests this gateway has in
flight on the replica are about to be stored there (the engine reports blocks only once they are computed), so
they count too: a burst of requests sharing a new system prompt then follows its first request. While the
stream is down (never connected, a gap, a restart) the gateway's own routing history, a bounded LRU of the
hashes it sent there, stands in for it.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence

from shoal.protocol.kv_events import KVEvent

DEFAULT_HISTORY_BLOCKS = 65536


class EventGap(Exception):
    """A stored/removed event did not follow the previous sequence number: the follower must resync."""


class PrefixIndex:
    """Block hashes one replica holds: ``in`` answers for routing (see the module docstring)."""

    def __init__(self, history_blocks: int = DEFAULT_HISTORY_BLOCKS) -> None:
        self.cached: set[int] = set()
        self.synced = False
        self.engine_id: str | None = None
        self.block_size: int | None = None
        self._seq = -1
        self._history: OrderedDict[int, None] = OrderedDict()
        self._history_blocks = history_blocks
        self._in_flight: Counter[int] = Counter()

    def __contains__(self, block_hash: object) -> bool:
        if block_hash in self._in_flight:
            return True
        return block_hash in (self.cached if self.synced else self._history)

    def apply(self, event: KVEvent) -> None:
        """Applies one event of the stream; raises ``EventGap`` when one was missed."""
        if event.type == "snapshot":
            self.cached = set(event.hashes)
            self.engine_id = event.engine_id
            self.block_size = event.block_size
            self._seq = event.seq
            self.synced = True
            return
        if not self.synced or event.seq != self._seq + 1:
            self.desync()
            raise EventGap(f"expected seq {self._seq + 1}, got {event.seq} ({event.type})")
        self._seq = event.seq
        if event.type == "stored":
            self.cached.update(event.hashes)
        else:
            self.cached.difference_update(event.hashes)

    def desync(self) -> None:
        """The stream is gone: fall back to the routing history until the next snapshot."""
        self.synced = False

    def routed(self, block_hashes: Sequence[int]) -> None:
        """Remembers a request sent here: its prefix counts while in flight and in the history after."""
        self._in_flight.update(block_hashes)
        for block_hash in block_hashes:
            self._history[block_hash] = None
            self._history.move_to_end(block_hash)
        while len(self._history) > self._history_blocks:
            self._history.popitem(last=False)

    def finished(self, block_hashes: Iterable[int]) -> None:
        """A request sent here has ended; its blocks are now known (or not) through the event stream."""
        for block_hash in block_hashes:
            count = self._in_flight[block_hash] - 1
            if count > 0:
                self._in_flight[block_hash] = count
            else:
                self._in_flight.pop(block_hash, None)
