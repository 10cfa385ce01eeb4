"""A fleet's routing views with the indexes that make prefix-aware routing independent of the fleet's size.

``PrefixAware`` scanning a plain list looks at every replica per request: its match, load and headroom. Only two
kinds of replica can be chosen, though: one holding the request's first block, or, among the rest, one left
furthest under its bound (for a miss, also the one of the fewest homes among those nearly as roomy) and, among
equals, the nearest past the request's point on the ring. For replicas of one capacity headroom falls as load
grows, and replicas of equal load are equals. ``FleetIndex`` keeps what answers both questions:

- **holders**: block hash -> ids of the replicas that may hold it, told by the caller (``may_hold``) whenever a
  replica may come to hold a chain's first block (the simulator: when it routes a request there). Each query
  checks the replica's own ``cached`` and forgets those in the rotation that no longer hold it, so the index may
  say too much but never too little, as long as every replica that holds a block was told since it last failed
  the check. A popular prefix gathers many holders over a long run (each spill makes one); the policy walks
  them with their loads, a set lookup each for most (``PrefixAware._holders_that_could_win``), and computes the
  matches of a few. (A heap of each block's holders by load, renewed at every load change, cost more to keep
  than the walk it saved: ~20 holders per request at 1,000 replicas, all far under their bound);
- **load order**: per capacity, buckets of replicas of equal load (numerator), each sorted by ring position,
  and the loads present, sorted. The roomiest others are the first bucket's replica nearest past the point,
  and the same of any next bucket as roomy (equal headroom): two buckets and a bisection per request, however
  many replicas are idle alike; the same again per capacity and number of ``homes``, where a miss looks for
  the lightest of the fewest homes whose headroom is near enough the roomiest's (homes levels are few: the
  prefixes a replica holds);
- the fleet's **total load** as exact integer numerators per denominator, so the mean is the plain scan's to
  the last bit.

The caller keeps it current: ``changed(view)`` after a view's load, sequences, homes or capacity change,
``reset(views)`` when the rotation changes. Policies only read it. Pure data, no I/O.
"""

from __future__ import annotations

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


@dataclass(slots=True)
class _Loads:
    """The replicas of one capacity by load: buckets of equal numerators and the numerators present, sorted.

    A sorted list rather than a heap: the lightest two are read on every request, without popping and
    pushing them back, and there are at most as many numerators as replicas (an insertion moves a few
    hundred pointers in C)."""

    buckets: dict[int, list[Slot]] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)

    def add(self, numerator: int, slot: Slot) -> None:
        bucket = self.buckets.get(numerator)
        if bucket is None:
            self.buckets[numerator] = [slot]
            insort(self.order, numerator)
        else:
            insort(bucket, slot)

    def remove(self, numerator: int, slot: Slot) -> None:
        bucket = self.buckets[numerator]
        del bucket[bisect_left(bucket, slot)]
        if not bucket:
            del self.buckets[numerator]
            order = self.order
            del order[bisect_left(order, numerator)]


@dataclass(slots=True)
class _Seen:
    """What ``changed`` last saw of one replica, and the buckets it sits in (found once, not per change)."""

    numerator: int
    denominator: int
    capacity: Capacity | None
    homes: int
    slot: Slot
    load: float  # ``load(view)``
    loads: _Loads  # its capacity's
    levels: dict[int, _Loads]  # its capacity's, per number of homes


class FleetIndex(Indexed):
    """The routable views in replica-id order, indexed by the blocks they hold and by load (module docstring)."""

    def __init__(self, views: Iterable[ReplicaView] = ()) -> None:
        super().__init__()
        self._holders: dict[int, set[str]] = {}
        self._by_id: dict[str, ReplicaView] = {}
        self._state: dict[str, _Seen] = {}
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
        for view in self:
            self._add(view)

    def changed(self, view: ReplicaView) -> None:
        """``view``'s load, sequences, homes or capacity changed (a view not in the rotation is ignored)."""
        if self._by_id.get(view.replica_id) is not view:
            return
        seen = self._state[view.replica_id]
        if view.capacity is seen.capacity and view.homes == seen.homes and load_numerator(view) == seen.numerator:
            return  # nothing the index keeps moved (a step that changed neither load nor homes)
        numerator, slot, levels = seen.numerator, seen.slot, seen.levels
        self._numerators[seen.denominator] -= numerator
        seen.loads.remove(numerator, slot)
        level = levels[seen.homes]
        level.remove(numerator, slot)
        if not level.buckets:
            del levels[seen.homes]
        if view.capacity is not seen.capacity:
            self._add(view, slot)
            return
        numerator = seen.numerator = load_numerator(view)  # the same buckets, found without hashing a capacity
        self._numerators[seen.denominator] += numerator
        seen.load = numerator / seen.denominator
        seen.loads.add(numerator, slot)
        homes = seen.homes = view.homes
        into = levels.get(homes)
        if into is None:
            into = levels[homes] = _Loads()
        into.add(numerator, slot)

    def may_hold(self, view: ReplicaView, block_hash: int) -> None:
        """``view`` may hold ``block_hash`` from now on (say it for the first block of every chain it may hold)."""
        holders = self._holders.get(block_hash)
        if holders is None:
            self._holders[block_hash] = {view.replica_id}
        else:
            holders.add(view.replica_id)

    def total_load(self) -> float:
        numerators = self._numerators
        if len(numerators) == 1:  # one kind of replica: ``total_of`` without sorting, to the same bit
            for denominator, numerator in numerators.items():
                return 0.0 + numerator / denominator
        return total_of(numerators)

    def holders(self, block_hash: int) -> list[tuple[ReplicaView, float]]:
        ids = self._holders.get(block_hash)
        if not ids:
            return []
        by_id, state = self._by_id, self._state
        found = [
            (view, state[replica_id].load)  # ``load(view)``, from what ``changed`` saw
            for replica_id in ids
            if (view := by_id.get(replica_id)) is not None and block_hash in view.cached
        ]
        if len(found) < len(ids):  # some no longer hold it, or are out of the rotation (kept, checked if back)
            gone = [i for i in ids if (view := by_id.get(i)) is not None and block_hash not in view.cached]
            for replica_id in gone:
                self._forget(block_hash, replica_id)
        return found

    def roomiest_others(
        self, skip: Container[str], headroom: Callable[[ReplicaView, float], float], point: int
    ) -> list[tuple[ReplicaView, float]]:
        found: list[tuple[ReplicaView, float]] = []
        for loads in self._loads.values():
            found.extend(self._lightest(loads, skip, headroom, point))
        return found

    def fewest_homes_others(
        self,
        skip: Container[str],
        headroom: Callable[[ReplicaView, float], float],
        point: int,
        enough: Callable[[ReplicaView, float], bool],
    ) -> list[tuple[ReplicaView, float]]:
        found: list[tuple[ReplicaView, float]] = []
        by_id, state = self._by_id, self._state
        for levels in self._by_homes.values():
            short = float("inf")  # the least load found without enough headroom: any as heavy has none either
            for homes in sorted(levels):
                level = levels[homes]
                anyone = by_id[level.buckets[level.order[0]][0][1]]  # of the lightest bucket: the level's most room
                held = state[anyone.replica_id].load
                if held >= short:
                    continue
                if not enough(anyone, headroom(anyone, held)):
                    short = held
                    continue  # no replica of this level has enough, so no search for the nearest
                lightest = self._lightest(level, skip, headroom, point)
                if lightest and enough(*lightest[0]):
                    found.extend(lightest)
                    break
        return found

    def _lightest(
        self, loads: _Loads, skip: Container[str], headroom: Callable[[ReplicaView, float], float], point: int
    ) -> list[tuple[ReplicaView, float]]:
        """Buckets lightest first, the nearest replica past ``point`` of each, while as roomy as the first."""
        buckets, by_id, state = loads.buckets, self._by_id, self._state
        found: list[tuple[ReplicaView, float]] = []
        top = 0.0
        for numerator in loads.order:
            bucket = buckets[numerator]
            if found:  # a bucket's replicas all have the headroom of any one of them (one capacity, one load)
                anyone = bucket[0][1]
                if headroom(by_id[anyone], state[anyone].load) < top:
                    break
            nearest = _nearest(bucket, point, skip)
            if nearest is None:
                continue
            view = by_id[nearest]
            room = headroom(view, state[nearest].load)
            if not found:
                top = room
            found.append((view, room))
        return found

    def _add(self, view: ReplicaView, slot: Slot | None = None) -> None:
        numerator = load_numerator(view)
        capacity, homes = view.capacity, view.homes
        denominator = load_denominator(capacity)
        self._numerators[denominator] = self._numerators.get(denominator, 0) + numerator
        if slot is None:
            slot = (ring_position(view.replica_id), view.replica_id)
        loads = self._loads.get(capacity)
        if loads is None:
            loads = self._loads[capacity] = _Loads()
        loads.add(numerator, slot)
        levels = self._by_homes.get(capacity)
        if levels is None:
            levels = self._by_homes[capacity] = {}
        level = levels.get(homes)
        if level is None:
            level = levels[homes] = _Loads()
        level.add(numerator, slot)
        self._state[view.replica_id] = _Seen(
            numerator, denominator, capacity, homes, slot, numerator / denominator, loads, levels
        )

    def _forget(self, block_hash: int, replica_id: str) -> None:
        """``replica_id`` no longer holds ``block_hash`` (it will be told again if it comes to)."""
        self._holders.get(block_hash, set()).discard(replica_id)


def _nearest(bucket: list[Slot], point: int, skip: Container[str]) -> str | None:
    """The replica of ``bucket`` (sorted by ring position) nearest past ``point``, wrapping, not in ``skip``."""
    start = bisect_left(bucket, (point, ""))
    size = len(bucket)
    for step in range(size):
        replica_id = bucket[(start + step) % size][1]
        if replica_id not in skip:
            return replica_id
    return None
