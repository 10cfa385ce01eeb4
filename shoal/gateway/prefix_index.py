"""What one engine replica has in its prefix cache, as far as the gateway knows. Pure data, no I/O.

Three sources, in order of trust. The engine's ``/kv/events`` stream (a snapshot, then stored/removed events
with consecutive sequence numbers) is exact while it is in sync. The prefixes of requests this gateway has in
flight on the replica are about to be stored there (the engine reports blocks only once they are computed), so
they count too: a burst of requests sharing a new system prompt then follows its first request. While the
stream is down (never connected, a gap, a restart) the gateway's own routing history, a bounded LRU of the
hashes it sent there, stands in for it.

It also counts the prefixes the replica is *home to* (``homes``): the distinct first blocks of the prompts this
gateway sent there, until the replica is known not to hold one (a removed event, a snapshot without it, or, while
the stream is down, its leaving the history; one the engine never reported storing goes when it leaves the history:
a request that ends before its stored event arrives keeps its home). Routing places a new prefix on an eligible
replica home to the fewest among those nearly as roomy as the roomiest, so homes spread evenly. A one-off prompt
counts too while it is held: among replicas alike, new prompts then rotate over those holding the fewest distinct
prompts.
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
        self._heads: set[int] = set()  # first blocks of the prompts sent here, while held

    @property
    def homes(self) -> int:
        """How many distinct prompt chains sent here the replica still holds."""
        return len(self._heads)

    def _drop_heads_gone(self, hashes: Iterable[int]) -> None:
        for block_hash in hashes:
            if block_hash in self._heads and block_hash not in self:
                self._heads.discard(block_hash)

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
            self._drop_heads_gone(list(self._heads))
            return
        if not self.synced or event.seq != self._seq + 1:
            self.desync()
            raise EventGap(f"expected seq {self._seq + 1}, got {event.seq} ({event.type})")
        self._seq = event.seq
        if event.type == "stored":
            self.cached.update(event.hashes)
        else:
            self.cached.difference_update(event.hashes)
            self._drop_heads_gone(event.hashes)

    def desync(self) -> None:
        """The stream is gone: fall back to the routing history until the next snapshot."""
        self.synced = False
        self._drop_heads_gone(list(self._heads))

    def routed(self, block_hashes: Sequence[int]) -> None:
        """Remembers a request sent here: its prefix counts while in flight and in the history after."""
        self._in_flight.update(block_hashes)
        if block_hashes:
            self._heads.add(block_hashes[0])
        for block_hash in block_hashes:
            self._history[block_hash] = None
            self._history.move_to_end(block_hash)
        while len(self._history) > self._history_blocks:
            evicted, _ = self._history.popitem(last=False)
            self._drop_heads_gone((evicted,))  # in sync, a head the engine never reported goes here

    def finished(self, block_hashes: Iterable[int]) -> None:
        """A request sent here has ended; its blocks are now known (or not) through the event stream."""
        for block_hash in block_hashes:
            count = self._in_flight[block_hash] - 1
            if count > 0:
                self._in_flight[block_hash] = count
            else:
                self._in_flight.pop(block_hash, None)
