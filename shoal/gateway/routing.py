"""Routing policies: which engine replica serves a request. Pure code, no I/O.

Each policy is ``decide(replicas, request) -> Decision``: the gateway gathers a snapshot of the replicas (their
load, their capacity and what they have cached) and applies the decision; the fleet simulator and the tests call
exactly the same code. ``docs/gateway.md`` ("Routing") has the rule's reasons, ``docs/benchmarks.md`` the runs.

Prefix-aware routing is consistent hashing with bounded loads (CHWBL) that scores replicas by what they hold
instead of by a hash ring. A replica is *eligible* while its load plus this request stays within ``bound_factor``
x the fleet's mean load after placement, the mean never counted below the replica's *floor*. Among eligible
replicas the longest cached prefix of the request's chained block hashes wins; ties go to the replica left
furthest under its bound. A request no eligible replica holds any of (a new prefix, or a spill from holders past
their bound) goes, among the eligible replicas within ``HOME_MARGIN_MISSES`` of its own cost of the roomiest
one's headroom, to the one *home to the fewest prefixes* (``ReplicaView.homes``), so homes spread evenly whatever
the load was at the moment each was placed, without sending a miss to a replica much busier than the roomiest.
Replicas equally far under their bound are ranked on a hash ring (the nearest past the point of the request's
first block), never by arrival or dict order, so gateways fed the same snapshot decide the same and send a new
prefix to the same idle engine before any KV event about it exists. An ``Indexed`` fleet
(``shoal.gateway.fleet_index``) hands the policy only the replicas that could win, and it decides exactly as the
plain scan (``tests/gateway/test_indexed_routing.py``).

The load measure, in tokens, is the work a replica still has (what a simulator must feed as well):
``ReplicaView.load_tokens`` is the uncached prompt still to prefill of its requests in flight (plus, where no
capacity is known, their output budgets); ``ReplicaView.sequences`` its requests in flight. A replica that
announces its ``Capacity`` is measured in sequences: each is charged ``token_budget / max_seqs`` (its share of a
step) and each token still to prefill ``1 / max_seqs``, since the engine chunks a long prompt over steps and a
full step of it costs one sequence. Its floor is ``Capacity.limit_tokens / bound_factor``: at low load it keeps
the requests whose prefix it holds until one more would queue there (``max_seqs`` sequences plus a step of prompt
waiting), and the bound bites before that; under heavier load the mean governs. A replica that announces nothing
gets ``load_floor_tokens`` (sized for big GPU engines); with no capacities and no ``block_size`` this is the
token-count policy the gateway started with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import takewhile
from typing import Literal, Protocol

Reason = Literal["prefix_hit", "load_bound_fallback", "miss", "round_robin", "least_load"]
REASONS: tuple[Reason, ...] = ("prefix_hit", "load_bound_fallback", "miss", "round_robin", "least_load")

DEFAULT_BOUND_FACTOR = 1.25
DEFAULT_LOAD_FLOOR_TOKENS = 4096
HOME_MARGIN_MISSES = 4.0  # a miss may go to a replica this many of its own costs less roomy than the roomiest


@dataclass(frozen=True)
class Capacity:
    """What one replica runs at once without queueing: its engine scheduler's two limits, as it announces them."""

    token_budget: int  # tokens computed per step (the engine's max_num_batched_tokens)
    max_seqs: int  # sequences running at once (max_num_seqs)

    def __post_init__(self) -> None:
        if self.token_budget < 1 or self.max_seqs < 1:
            raise ValueError(
                f"capacity limits must be >= 1, got token_budget={self.token_budget}, max_seqs={self.max_seqs}"
            )

    @property
    def sequence_tokens(self) -> float:
        """What one running sequence is charged: its share of a step's token budget."""
        return self.token_budget / self.max_seqs

    @property
    def limit_tokens(self) -> float:
        """Where a replica starts to queue: ``max_seqs`` sequences running and a full step of prompt waiting."""
        return self.token_budget + self.sequence_tokens

    def prefill_charge(self, tokens: float) -> float:
        """What ``tokens`` still to prefill are charged: a full step's budget of them counts as one sequence."""
        return tokens / self.max_seqs


@dataclass(slots=True)
class ReplicaView:
    """What a policy may know about one replica at decision time (the load measure: module docstring).

    Policies only read it. A caller may update one in place between decisions instead of building a new one:
    the simulator keeps one per replica and changes its load as the gateway's leases would.
    """

    replica_id: str
    load_tokens: int = 0
    cached: Container[int] = field(default_factory=frozenset)
    sequences: int = 0
    capacity: Capacity | None = None
    homes: int = 0  # prefixes it is home to: distinct prompt chains placed there that it still holds


@dataclass(slots=True)
class RouteRequest:
    """The part of a request routing looks at: its prompt's chained block hashes and its token cost.

    Like ``Decision``, a plain slotted dataclass: a frozen one costs about 2.5x as much to build, and the
    simulator builds one of each per request, a million times in a run.

    ``cost_tokens`` is prompt plus output budget; ``output_tokens`` the output part of it; ``block_size`` the
    tokens each block hash covers, which a replica holding that block need not compute (0: not known).
    """

    block_hashes: Sequence[int] = ()
    cost_tokens: int = 1
    block_size: int = 0
    output_tokens: int = 0

    def prefill_tokens(self, matched: int) -> int:
        """Prompt tokens a replica holding ``matched`` of the blocks still has to compute."""
        return max(self.cost_tokens - self.output_tokens - self.block_size * matched, 0)

    def tokens_on(self, capacity: Capacity | None, matched: int) -> int:
        """What the request adds to the ``load_tokens`` of a replica with this capacity holding ``matched`` blocks."""
        prefill = self.prefill_tokens(matched)
        return prefill if capacity is not None else prefill + self.output_tokens


@dataclass(slots=True)
class Decision:
    replica_id: str
    reason: Reason
    matched_blocks: int = 0


class RoutingPolicy(Protocol):
    name: str

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        """Picks one of ``replicas`` (never empty) for ``request``."""
        ...


def matched_blocks(cached: Container[int], block_hashes: Sequence[int]) -> int:
    """Length of the leading run of ``block_hashes`` that ``cached`` holds (the reusable prefix, in blocks)."""
    return len(list(takewhile(cached.__contains__, block_hashes)))  # one C loop: prompts run to hundreds of blocks


RING = 1 << 64


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@lru_cache(maxsize=65536)
def ring_position(replica_id: str) -> int:
    """Where a replica sits on the hash ring: stable across processes, so every gateway ranks replicas alike."""
    return _hash64(replica_id.encode())


def key_point(key: int) -> int:
    """Where a request's first block hash falls on the ring (hashed again: simulated hashes are not uniform)."""
    return _hash64(key.to_bytes(8, "little"))


def clockwise(replica_id: str, point: int) -> int:
    """How far past ``point`` a replica sits on the ring: among equals, the nearest wins."""
    return (ring_position(replica_id) - point) % RING


def load_denominator(capacity: Capacity | None) -> int:
    """What a replica's load numerator is divided by: its ``max_seqs`` (1 without a capacity)."""
    return 1 if capacity is None else capacity.max_seqs


def load_numerator(replica: ReplicaView) -> int:
    """A replica's load times its ``load_denominator``: an integer, so that a fleet's total is exact in any order
    (the plain scan and ``Indexed`` fleets sum it differently and must agree to the last bit)."""
    if replica.capacity is None:
        return replica.load_tokens
    return replica.load_tokens + replica.sequences * replica.capacity.token_budget


def load(replica: ReplicaView) -> float:
    """A replica's load in tokens: its sequences' charge plus what it still has to prefill (charged as above)."""
    return load_numerator(replica) / load_denominator(replica.capacity)


def total_of(numerators: dict[int, int]) -> float:
    """The total load of a fleet from its load numerators summed per denominator (one division per denominator)."""
    return sum(numerator / denominator for denominator, numerator in sorted(numerators.items()))


def total_load(replicas: Iterable[ReplicaView]) -> float:
    """The fleet's total load, exactly as an ``Indexed`` fleet keeps it."""
    numerators: dict[int, int] = {}
    for replica in replicas:
        denominator = load_denominator(replica.capacity)
        numerators[denominator] = numerators.get(denominator, 0) + load_numerator(replica)
    return total_of(numerators)


def cost_on(replica: ReplicaView, request: RouteRequest, matched: int) -> float:
    """What placing ``request`` on ``replica`` adds to its ``load``."""
    tokens = request.tokens_on(replica.capacity, matched)
    if replica.capacity is None:
        return tokens
    return replica.capacity.prefill_charge(tokens) + replica.capacity.sequence_tokens


def mean_load_after(replicas: Sequence[ReplicaView], cost_tokens: int) -> float:
    """The fleet's mean load once a request of ``cost_tokens`` is placed (charged at its full cost)."""
    return (total_load(replicas) + cost_tokens) / len(replicas)


def floor_tokens(replica: ReplicaView, bound_factor: float, default_floor: int) -> float:
    """Below this mean the bound does not tighten: the replica's capacity over the bound, else the default."""
    if replica.capacity is None:
        return default_floor
    return replica.capacity.limit_tokens / bound_factor


def load_threshold(replicas: Sequence[ReplicaView], cost_tokens: int, bound_factor: float, floor: float) -> float:
    """The most load a replica with this ``floor`` may hold after taking the request and still count as balanced."""
    return bound_factor * max(mean_load_after(replicas, cost_tokens), float(floor))


class IdOrdered(list[ReplicaView]):
    """Views their caller keeps in replica-id order, so a policy that needs that order does not sort them per
    request (the simulator keeps one across a thousand replicas; a plain sequence is sorted when needed)."""


def _replica_id(replica: ReplicaView) -> str:
    return replica.replica_id


def by_id(replicas: Sequence[ReplicaView]) -> Sequence[ReplicaView]:
    """``replicas`` in replica-id order: as given when the caller keeps them so (``IdOrdered``), else sorted."""
    return replicas if isinstance(replicas, IdOrdered) else sorted(replicas, key=_replica_id)


class RoundRobin:
    """Each replica in turn (by sorted id, so the order does not depend on discovery order): a cursor over
    that order, O(1) per request when the views come ``IdOrdered``."""

    name = "round-robin"

    def __init__(self) -> None:
        self._counter = 0

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        ordered = by_id(replicas)
        chosen = ordered[self._counter % len(ordered)]
        self._counter += 1
        return Decision(chosen.replica_id, "round_robin", matched_blocks(chosen.cached, request.block_hashes))


class LeastLoad:
    """The replica with the least load; ties taken in turn, as a plain load balancer would."""

    name = "least-load"

    def __init__(self) -> None:
        self._counter = 0

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        loads = [load(r) for r in replicas]
        lightest = min(loads)
        tied = [r for r, value in zip(replicas, loads, strict=True) if value == lightest]
        ordered = by_id(IdOrdered(tied) if isinstance(replicas, IdOrdered) else tied)
        chosen = ordered[self._counter % len(ordered)]
        self._counter += 1
        return Decision(chosen.replica_id, "least_load", matched_blocks(chosen.cached, request.block_hashes))


class Indexed(IdOrdered):
    """Views kept with two indexes, so that ``PrefixAware`` looks at a few replicas per request instead of all of
    them (``shoal.gateway.fleet_index.FleetIndex``, which the simulator keeps across a thousand replicas). Its
    decisions are the plain scan's, bit for bit: the candidates it looks at include every replica the scan could
    choose (the holders of the request's first block, and the lightest of the rest), and the total load is exact.
    """

    def total_load(self) -> float:
        """``total_load`` of the views."""
        raise NotImplementedError

    def holders(self, block_hash: int) -> list[tuple[ReplicaView, float]]:
        """Every view whose ``cached`` holds ``block_hash``, in any order, with its ``load``."""
        raise NotImplementedError

    def roomiest_others(
        self, skip: Container[str], headroom: Callable[[ReplicaView, float], float], point: int
    ) -> list[tuple[ReplicaView, float]]:
        """Among the views not in ``skip``, with their ``headroom(view, load(view))``: for each capacity, of those
        with the most headroom, at least the one nearest past ``point`` on the ring (it beats the others tied
        with it). ``headroom`` must depend only on a view's capacity and load, and not grow with load."""
        raise NotImplementedError

    def fewest_homes_others(
        self,
        skip: Container[str],
        headroom: Callable[[ReplicaView, float], float],
        point: int,
        enough: Callable[[ReplicaView, float], bool],
    ) -> list[tuple[ReplicaView, float]]:
        """As ``roomiest_others``, among the views of the fewest ``homes`` whose headroom is ``enough``, for each
        capacity (none for a capacity where no view outside ``skip`` has enough). ``enough(view, headroom)`` must
        depend only on the view's capacity and headroom, and hold for more headroom if it holds for less."""
        raise NotImplementedError


Candidate = tuple[ReplicaView, int, float]  # a replica, the blocks of the request it holds, its headroom


class _Terms:
    """One decision's ``PrefixAware.headroom``, its limit and costs kept per capacity and match, term for term
    (a decision asks it of every replica it looks at, most of them of one capacity)."""

    __slots__ = ("capacity", "costs", "known", "limit", "mean", "policy", "request")

    def __init__(self, policy: PrefixAware, request: RouteRequest, mean: float) -> None:
        self.policy, self.request, self.mean = policy, request, mean
        self.known: dict[int, tuple[float, dict[int, float]]] = {}  # id(capacity) -> limit, cost per match
        self.capacity: object = self  # the capacity of the terms at hand (none yet)
        self.limit = 0.0
        self.costs: dict[int, float] = {}

    def of(self, replica: ReplicaView, matched: int) -> float:
        """The request's cost on the replica with ``matched`` blocks; ``limit`` is then the replica's limit."""
        if replica.capacity is not self.capacity:
            self.capacity = replica.capacity
            known = self.known.get(id(replica.capacity))
            if known is None:
                known = self.known[id(replica.capacity)] = (self.policy.limit(replica, self.mean), {})
            self.limit, self.costs = known
        cost = self.costs.get(matched)
        if cost is None:
            cost = self.costs[matched] = cost_on(replica, self.request, matched)
        return cost

    def miss_cost(self, replica: ReplicaView) -> float:
        """The request's cost on the replica matching nothing (``cost_on(replica, request, 0)``)."""
        return self.of(replica, 0)

    def room(self, replica: ReplicaView, held: float, matched: int = 0) -> float:
        """``policy.headroom(replica, held, request, matched, mean)``."""
        cost = self.of(replica, matched)
        return self.limit - (held + cost)


@dataclass
class PrefixAware:
    """Longest cached prefix among the replicas within the load bound (see the module docstring)."""

    bound_factor: float = DEFAULT_BOUND_FACTOR
    load_floor_tokens: int = DEFAULT_LOAD_FLOOR_TOKENS
    name: str = "prefix-aware"
    indexed = True  # a caller that keeps many replicas may hand it an ``Indexed`` fleet

    def __post_init__(self) -> None:
        if self.bound_factor < 1.0:
            raise ValueError(f"bound_factor must be >= 1.0, got {self.bound_factor}")
        if self.load_floor_tokens < 0:
            raise ValueError(f"load_floor_tokens must be >= 0, got {self.load_floor_tokens}")

    def limit(self, replica: ReplicaView, mean: float) -> float:
        """The most load ``replica`` may hold after taking a request, at this mean load after placement."""
        return self.bound_factor * max(mean, floor_tokens(replica, self.bound_factor, self.load_floor_tokens))

    def headroom(self, replica: ReplicaView, held: float, request: RouteRequest, matched: int, mean: float) -> float:
        """Limit minus load after taking the request: >= 0 means eligible."""
        return self.limit(replica, mean) - (held + cost_on(replica, request, matched))

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        hashes = request.block_hashes
        if isinstance(replicas, Indexed):
            return self._decide_indexed(replicas, request)
        numerators: dict[int, int] = {}  # ``total_load``'s, with each replica's ``load`` on the way
        loads = []
        for r in replicas:
            denominator, numerator = load_denominator(r.capacity), load_numerator(r)
            numerators[denominator] = numerators.get(denominator, 0) + numerator
            loads.append(numerator / denominator)
        mean = (total_of(numerators) + request.cost_tokens) / len(replicas)  # mean_load_after
        terms = _Terms(self, request, mean)  # ``headroom``, its limit and costs computed once per capacity and match
        first = hashes[0] if hashes else 0
        candidates = [
            (r, matched, terms.room(r, held, matched))
            for r, held in zip(replicas, loads, strict=True)
            for matched in (matched_blocks(r.cached, hashes) if hashes and first in r.cached else 0,)
        ]
        return self._choose(candidates, any(c[1] for c in candidates), first, terms.miss_cost)

    def _decide_indexed(self, fleet: Indexed, request: RouteRequest) -> Decision:
        """The plain scan's decision from the holders of the first block and the few others that could win."""
        hashes = request.block_hashes
        mean = (fleet.total_load() + request.cost_tokens) / len(fleet)
        terms = _Terms(self, request, mean)
        headroom = terms.room
        first = hashes[0] if hashes else 0
        holders = fleet.holders(first) if hashes else []
        could_win, beyond = self._holders_that_could_win(holders, terms)
        miss_cost = terms.miss_cost
        if any(c[2] >= 0 for c in could_win):  # an eligible holder: the others, matching nothing, cannot win
            return self._choose(could_win, True, first, miss_cost)
        holding, point = {r.replica_id for r, _ in holders}, key_point(first)
        others = fleet.roomiest_others(holding, headroom, point)
        top = max((room for _, room in others), default=-1.0)
        if top >= 0:  # a miss: the fewest homes within the margin of the roomiest

            def enough(view: ReplicaView, room: float) -> bool:
                return room >= 0 and room >= top - HOME_MARGIN_MISSES * miss_cost(view)

            others += fleet.fewest_homes_others(holding, headroom, point, enough)
        candidates = [(r, 0, room) for r, room in others]
        candidates.extend(could_win)
        if beyond and not any(c[2] >= 0 for c in candidates):  # none eligible: the roomiest of all is chosen
            candidates.extend(self._exact(beyond, request, mean))
        return self._choose(candidates, bool(holders), first, miss_cost)

    @staticmethod
    def _holders_that_could_win(
        holders: list[tuple[ReplicaView, float]], terms: _Terms
    ) -> tuple[list[Candidate], list[tuple[ReplicaView, float]]]:
        """The holders that could be chosen while some replica is eligible, with their matches; and those that
        could not be eligible even matching every block (they matter only when no replica is).

        A holder's headroom only grows with its match (its cost falls). So once an eligible holder matched ``m``
        blocks with headroom ``h``, another that lacks block ``m`` (it matches at most ``m``) and would have less
        than ``h`` at ``m`` blocks, or lacks block ``m - 1`` too (it matches less), cannot be chosen: a set lookup
        or two instead of walking its chain. A popular prefix gathers many holders over a long run, most of them
        far under their bound.
        """
        hashes = terms.request.block_hashes
        size = len(hashes)
        found: list[Candidate] = []
        beyond: list[tuple[ReplicaView, float]] = []
        best, best_room = 0, 0.0  # the best eligible holder so far: its match (0: none yet) and headroom
        capacity: object = terms  # the capacity whose terms are at hand (none yet)
        limit = full = at_best = 0.0
        for view, held in holders:
            if view.capacity is not capacity:
                capacity = view.capacity
                full, at_best = terms.of(view, size), (terms.of(view, best) if best else 0.0)
                limit = terms.limit
            if limit - (held + full) < 0:  # ``headroom`` with every block matched, term for term
                beyond.append((view, held))
                continue
            if (
                best
                and (best == size or hashes[best] not in view.cached)  # it matches at most ``best``
                and (limit - (held + at_best) < best_room or hashes[best - 1] not in view.cached)
            ):
                continue
            matched = matched_blocks(view.cached, hashes)
            room = terms.room(view, held, matched)
            found.append((view, matched, room))
            if room >= 0 and (matched > best or (matched == best and room > best_room)):
                best, best_room = matched, room
                at_best = terms.of(view, best)
        return found, beyond

    def _exact(self, holders: list[tuple[ReplicaView, float]], request: RouteRequest, mean: float) -> list[Candidate]:
        hashes = request.block_hashes
        return [
            (r, matched, self.headroom(r, held, request, matched, mean))
            for r, held in holders
            for matched in (matched_blocks(r.cached, hashes),)
        ]

    @staticmethod
    def _choose(
        candidates: list[Candidate], held_anywhere: bool, key: int, miss_cost: Callable[[ReplicaView], float]
    ) -> Decision:
        """The rule of the module docstring over ``candidates``, which hold every replica it could pick;
        ``miss_cost(replica)`` is the request's ``cost_on`` the replica matching nothing."""
        eligible = [c for c in candidates if c[2] >= 0]
        if not eligible:
            chosen = _roomiest(candidates, key)
            return Decision(chosen[0].replica_id, "load_bound_fallback", chosen[1])
        best = max(c[1] for c in eligible)
        if best > 0:
            chosen = _roomiest([c for c in eligible if c[1] == best], key)
            return Decision(chosen[0].replica_id, "prefix_hit", best)
        top = max(c[2] for c in eligible)
        near = [c for c in eligible if c[2] >= top - HOME_MARGIN_MISSES * miss_cost(c[0])]
        fewest = min(c[0].homes for c in near)
        chosen = _roomiest([c for c in near if c[0].homes == fewest], key)
        reason: Reason = "load_bound_fallback" if held_anywhere else "miss"
        return Decision(chosen[0].replica_id, reason, 0)


def _roomiest(among: list[Candidate], key: int) -> Candidate:
    """The candidate left furthest under its bound; equals by the ring (past ``key``'s point), placed only for them."""
    if len(among) == 1:
        return among[0]
    top = max(c[2] for c in among)
    tied = [c for c in among if c[2] == top]
    if len(tied) == 1:
        return tied[0]
    point = key_point(key)
    return min(tied, key=lambda c: (clockwise(c[0].replica_id, point), c[0].replica_id))


def make_policy(
    name: str, bound_factor: float = DEFAULT_BOUND_FACTOR, load_floor_tokens: int = DEFAULT_LOAD_FLOOR_TOKENS
) -> RoutingPolicy:
    """Builds a policy by its command-line name."""
    if name == "round-robin":
        return RoundRobin()
    if name == "least-load":
        return LeastLoad()
    if name == "prefix-aware":
        return PrefixAware(bound_factor, load_floor_tokens)
    raise ValueError(f"unknown routing policy {name!r}; choose round-robin, least-load or prefix-aware")


POLICY_NAMES = ("round-robin", "least-load", "prefix-aware")
