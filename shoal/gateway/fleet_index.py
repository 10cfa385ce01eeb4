"""A fleet's routing views with the indexes that make prefix-aware routing independent of the fleet's size.

``PrefixAware`` scanning a plain list looks at every replica per request: its match, load and headroom. Only
two kinds of replica can be chosen, though: one holding the request's first block (of which only the lightest
can be eligible), or, among the rest, one left furthest under its bound and, among equals, the
nearest past the request's point on the ring. For replicas of one capacity headroom falls as load grows, and
replicas of equal load are equals. ``FleetIndex`` keeps what answers both questions:

- **holders**: block hash -> ids of the replicas that may hold it, told by the caller (``may_hold``) whenever a
  replica may come to hold a chain's first block (the simulator: when it routes a request there), and per block
  and capacity a heap of those holders by load (an entry renewed at each change of the holder's load, stale ones
  dropped as they surface). Each query checks the replica's own ``cached`` and forgets those in the rotation that
  no longer hold it, so the index may say too much but never too little, as long as every replica that holds a
  block was told since it last failed the check. A popular prefix gathers many holders over a long run (each
  spill makes one); the policy takes them lightest first and stops at the first that could not be eligible even
  with every block matched, so it computes the matches of a few;
- **load order**: per capacity, buckets of replicas of equal load (numerator), each sorted by ring position,
  and a heap of the loads present (stale ones skipped and dropped when they surface). The roomiest others are
  the first bucket's replica nearest past the point, and the same of any next bucket as roomy (equal
  headroom): a few heap pops and a bisection per request, however many replicas are idle alike; the same
  again per capacity and number of ``homes``, where a miss looks for the lightest of the fewest homes that is
  eligible (homes levels are few: the prefixes a replica holds);
- the fleet's **total load** as exact integer numerators per denominator, so the mean is the plain scan's to
  the last bit.

The caller keeps it current: ``changed(view)`` after a view's load, sequences or capacity change, ``reset(views)``
when the rotation changes. Policies only read it. Pure data, no I/O.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field

from shoal.gateway.routing import (
    Capacity,
    Indexed,
    ReplicaView,
    load_denominator,
    load_numerator,
    ring_position,
    total_of,
)

Slot = tuple[int, str]  # ring position, replica id: a bucket's sort order
_Entry = tuple[int, str, int]  # load numerator, replica id, version of its state: a holder in a block's heap


@dataclass(slots=True)
class _Loads:
    """The replicas of one capacity by load: buckets of equal numerators and a heap of the numerators present."""

    buckets: dict[int, list[Slot]] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)

    def add(self, numerator: int, slot: Slot) -> None:
        bucket = self.buckets.get(numerator)
        if bucket is None:
            self.buckets[numerator] = [slot]
            heapq.heappush(self.order, numerator)
            if len(self.order) > 2 * len(self.buckets) + 64:  # stale numerators outnumber the live ones
                self.order = sorted(self.buckets)
        else:
            insort(bucket, slot)

    def remove(self, numerator: int, slot: Slot) -> None:
        bucket = self.buckets[numerator]
        del bucket[bisect_left(bucket, slot)]
        if not bucket:
            del self.buckets[numerator]  # its numerator stays in the heap until it surfaces


class FleetIndex(Indexed):
    """The routable views in replica-id order, indexed by the blocks they hold and by load (module docstring)."""

    def __init__(self, views: Iterable[ReplicaView] = ()) -> None:
        super().__init__()
        self._holders: dict[int, set[str]] = {}
        self._told: dict[str, set[int]] = {}  # replica id -> the blocks it may hold
        self._held: dict[int, dict[Capacity | None, list[_Entry]]] = {}  # block -> its holders by load, per capacity
        self._by_id: dict[str, ReplicaView] = {}
        self._state: dict[str, tuple[int, int, Capacity | None, int]] = {}  # numerator, denominator, capacity, version
        self._homes: dict[str, int] = {}  # replica id -> its homes when ``changed`` last saw it
        self._version = 0
        self._numerators: dict[int, int] = {}  # load denominator -> sum of the numerators
        self._loads: dict[Capacity | None, _Loads] = {}
        self._by_homes: dict[Capacity | None, dict[int, _Loads]] = {}  # the same, per number of homes
        self.reset(views)

    def reset(self, views: Iterable[ReplicaView]) -> None:
        """Makes the rotation exactly ``views`` (what replicas may hold is kept, and checked when asked)."""
        self[:] = sorted(views, key=lambda view: view.replica_id)
        self._by_id = {view.replica_id: view for view in self}
        self._state = {}
        self._numerators = {}
        self._loads = {}
        self._by_homes = {}
        self._homes = {}
        for view in self:
            self._add(view)

    def changed(self, view: ReplicaView) -> None:
        """``view``'s load, sequences, homes or capacity changed (a view not in the rotation is ignored)."""
        if self._by_id.get(view.replica_id) is not view:
            return
        numerator, denominator, capacity, _ = self._state[view.replica_id]
        self._numerators[denominator] -= numerator
        slot = (ring_position(view.replica_id), view.replica_id)
        self._loads[capacity].remove(numerator, slot)
        levels = self._by_homes[capacity]
        homes = self._homes[view.replica_id]
        levels[homes].remove(numerator, slot)
        if not levels[homes].buckets:
            del levels[homes]
        self._add(view)

    def may_hold(self, view: ReplicaView, block_hash: int) -> None:
        """``view`` may hold ``block_hash`` from now on (say it for the first block of every chain it may hold)."""
        holders = self._holders.get(block_hash)
        if holders is None:
            self._holders[block_hash] = {view.replica_id}
        else:
            holders.add(view.replica_id)
        told = self._told.setdefault(view.replica_id, set())
        if block_hash in told:
            return  # its entry in the block's heap is already there, renewed at each change of its load
        told.add(block_hash)
        if self._by_id.get(view.replica_id) is view:
            numerator, _, capacity, version = self._state[view.replica_id]
            self._push_held(block_hash, capacity, (numerator, view.replica_id, version))

    def total_load(self) -> float:
        return total_of(self._numerators)

    def holders(self, block_hash: int) -> list[tuple[ReplicaView, float]]:
        ids = self._holders.get(block_hash)
        if not ids:
            return []
        found: list[tuple[ReplicaView, float]] = []
        gone = []
        by_id, state = self._by_id, self._state
        for replica_id in ids:
            view = by_id.get(replica_id)
            if view is None:
                continue  # out of the rotation, maybe for a while: kept, and checked if it comes back
            if block_hash in view.cached:
                numerator, denominator, _, _ = state[replica_id]
                found.append((view, numerator / denominator))  # ``load(view)``, from what ``changed`` saw
            else:
                gone.append(replica_id)
        for replica_id in gone:
            self._forget(block_hash, replica_id)
        return found

    def holding(self, block_hash: int) -> Container[str]:
        return _Holding(self, block_hash)

    def lightest_holders(
        self, block_hash: int, wanted: Callable[[ReplicaView, float], bool]
    ) -> tuple[list[tuple[ReplicaView, float]], bool]:
        found: list[tuple[ReplicaView, float]] = []
        held = False
        for heap in self._held.get(block_hash, {}).values():
            taken: list[_Entry] = []
            try:
                while heap:
                    entry = heapq.heappop(heap)
                    state = self._state.get(entry[1])
                    if state is None or state[3] != entry[2]:
                        continue  # stale: its load changed since, or it left the rotation
                    view = self._by_id[entry[1]]
                    if block_hash not in view.cached:
                        self._forget(block_hash, entry[1])
                        continue
                    taken.append(entry)
                    held = True
                    load = state[0] / state[1]
                    if not wanted(view, load):
                        break
                    found.append((view, load))
            finally:
                for entry in taken:
                    heapq.heappush(heap, entry)
        return found, held

    def roomiest_others(
        self, skip: Container[str], headroom: Callable[[ReplicaView], float], point: int
    ) -> list[tuple[ReplicaView, float]]:
        found: list[tuple[ReplicaView, float]] = []
        for loads in self._loads.values():
            found.extend(self._lightest(loads, skip, headroom, point))
        return found

    def fewest_homes_others(
        self, skip: Container[str], headroom: Callable[[ReplicaView], float], point: int
    ) -> list[tuple[ReplicaView, float]]:
        found: list[tuple[ReplicaView, float]] = []
        for levels in self._by_homes.values():
            for homes in sorted(levels):
                lightest = self._lightest(levels[homes], skip, headroom, point)
                if lightest and lightest[0][1] >= 0:
                    found.extend(lightest)
                    break
        return found

    def _lightest(
        self, loads: _Loads, skip: Container[str], headroom: Callable[[ReplicaView], float], point: int
    ) -> list[tuple[ReplicaView, float]]:
        """Buckets lightest first, the nearest replica past ``point`` of each, while as roomy as the first."""
        order, buckets = loads.order, loads.buckets
        taken: list[int] = []
        found: list[tuple[ReplicaView, float]] = []
        top = 0.0
        try:
            while order:
                numerator = heapq.heappop(order)
                if numerator not in buckets or (taken and taken[-1] == numerator):
                    continue  # a stale or repeated numerator: dropped for good
                taken.append(numerator)
                nearest = _nearest(buckets[numerator], point, skip)
                if nearest is None:
                    continue
                view = self._by_id[nearest]
                room = headroom(view)
                if found and room < top:
                    break
                if not found:
                    top = room
                found.append((view, room))
        finally:
            for numerator in taken:
                heapq.heappush(order, numerator)
        return found

    def _add(self, view: ReplicaView) -> None:
        numerator = load_numerator(view)
        denominator = load_denominator(view.capacity)
        self._numerators[denominator] = self._numerators.get(denominator, 0) + numerator
        self._version += 1
        self._state[view.replica_id] = (numerator, denominator, view.capacity, self._version)
        for block_hash in self._told.get(view.replica_id, ()):
            self._push_held(block_hash, view.capacity, (numerator, view.replica_id, self._version))
        slot = (ring_position(view.replica_id), view.replica_id)
        loads = self._loads.get(view.capacity)
        if loads is None:
            loads = self._loads[view.capacity] = _Loads()
        loads.add(numerator, slot)
        self._homes[view.replica_id] = view.homes
        levels = self._by_homes.setdefault(view.capacity, {})
        level = levels.get(view.homes)
        if level is None:
            level = levels[view.homes] = _Loads()
        level.add(numerator, slot)

    def _push_held(self, block_hash: int, capacity: Capacity | None, entry: _Entry) -> None:
        heaps = self._held.setdefault(block_hash, {})
        heap = heaps.setdefault(capacity, [])
        heapq.heappush(heap, entry)
        if len(heap) > 4 * len(self._holders.get(block_hash, ())) + 16:  # stale entries outnumber the live ones
            state = self._state
            heap[:] = [e for e in heap if (st := state.get(e[1])) is not None and st[3] == e[2]]
            heapq.heapify(heap)

    def _forget(self, block_hash: int, replica_id: str) -> None:
        """``replica_id`` no longer holds ``block_hash`` (it will be told again if it comes to)."""
        self._holders.get(block_hash, set()).discard(replica_id)
        self._told.get(replica_id, set()).discard(block_hash)


class _Holding:
    """The ids of the replicas that hold a block, checked one at a time as they are asked about."""

    __slots__ = ("block_hash", "index")

    def __init__(self, index: FleetIndex, block_hash: int) -> None:
        self.index, self.block_hash = index, block_hash

    def __contains__(self, replica_id: object) -> bool:
        ids = self.index._holders.get(self.block_hash, ())
        view = self.index._by_id.get(replica_id) if isinstance(replica_id, str) else None
        return replica_id in ids and view is not None and self.block_hash in view.cached


def _nearest(bucket: list[Slot], point: int, skip: Container[str]) -> str | None:
    """The replica of ``bucket`` (sorted by ring position) nearest past ``point``, wrapping, not in ``skip``."""
    start = bisect_left(bucket, (point, ""))
    size = len(bucket)
    for step in range(size):
        replica_id = bucket[(start + step) % size][1]
        if replica_id not in skip:
            return replica_id
    return None
