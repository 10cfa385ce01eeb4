"""Routing policies: which engine replica serves a request. Pure code, no I/O.

Each policy is ``decide(replicas, request) -> Decision``: the gateway gathers a snapshot of the replicas
(their in-flight load and what they have cached) and applies the decision; the fleet simulator and the tests
call exactly the same code.

Prefix-aware routing works like consistent hashing with bounded loads (CHWBL), but scores replicas by what
they really hold instead of by a hash ring. Load is counted in in-flight tokens (prompt plus requested
output): a replica is *eligible* while its load plus this request stays within ``bound_factor`` x the fleet's
mean load after placement, where the mean never counts below ``load_floor_tokens`` (so that a handful of
requests on an idle fleet is not mistaken for imbalance). Among eligible replicas the longest cached prefix
of the request's chained block hashes wins; ties go to the least loaded. A request nobody holds any of (a
miss) is placed by rendezvous hashing of its first block among the eligible replicas, so that every gateway
replica (active-active, each following the same KV events) sends a new prefix to the same engine even before
that engine has reported storing it. Ties that remain are broken by the same rendezvous weight, never by
arrival order or dict order, so two gateways fed the same snapshot decide the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

Reason = Literal["prefix_hit", "load_bound_fallback", "miss", "round_robin", "least_load"]
REASONS: tuple[Reason, ...] = ("prefix_hit", "load_bound_fallback", "miss", "round_robin", "least_load")

DEFAULT_BOUND_FACTOR = 1.25
DEFAULT_LOAD_FLOOR_TOKENS = 4096


@dataclass(frozen=True)
class ReplicaView:
    """What a policy may know about one replica at decision time."""

    replica_id: str
    load_tokens: int = 0
    cached: Container[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class RouteRequest:
    """The part of a request routing looks at: its prompt's chained block hashes and its token cost."""

    block_hashes: Sequence[int] = ()
    cost_tokens: int = 1


@dataclass(frozen=True)
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
    count = 0
    for block_hash in block_hashes:
        if block_hash not in cached:
            break
        count += 1
    return count


def rendezvous_weight(replica_id: str, key: int) -> int:
    """Highest-random-weight hashing: stable across processes, so every gateway ranks replicas alike."""
    digest = hashlib.blake2b(key.to_bytes(8, "little") + replica_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def load_threshold(replicas: Sequence[ReplicaView], cost_tokens: int, bound_factor: float, floor: int) -> float:
    """The most in-flight tokens a replica may hold after taking this request and still count as balanced."""
    mean_after = (sum(r.load_tokens for r in replicas) + cost_tokens) / len(replicas)
    return bound_factor * max(mean_after, float(floor))


def _least_loaded(replicas: Sequence[ReplicaView], key: int) -> ReplicaView:
    return min(replicas, key=lambda r: (r.load_tokens, -rendezvous_weight(r.replica_id, key), r.replica_id))


class RoundRobin:
    """Each replica in turn (by sorted id, so the order does not depend on discovery order)."""

    name = "round-robin"

    def __init__(self) -> None:
        self._counter = 0

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        ordered = sorted(replicas, key=lambda r: r.replica_id)
        chosen = ordered[self._counter % len(ordered)]
        self._counter += 1
        return Decision(chosen.replica_id, "round_robin", matched_blocks(chosen.cached, request.block_hashes))


class LeastLoad:
    """The replica with the fewest in-flight tokens; ties taken in turn, as a plain load balancer would."""

    name = "least-load"

    def __init__(self) -> None:
        self._counter = 0

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        lightest = min(r.load_tokens for r in replicas)
        tied = sorted((r for r in replicas if r.load_tokens == lightest), key=lambda r: r.replica_id)
        chosen = tied[self._counter % len(tied)]
        self._counter += 1
        return Decision(chosen.replica_id, "least_load", matched_blocks(chosen.cached, request.block_hashes))


@dataclass
class PrefixAware:
    """Longest cached prefix among the replicas within the load bound (see the module docstring)."""

    bound_factor: float = DEFAULT_BOUND_FACTOR
    load_floor_tokens: int = DEFAULT_LOAD_FLOOR_TOKENS
    name: str = "prefix-aware"

    def __post_init__(self) -> None:
        if self.bound_factor < 1.0:
            raise ValueError(f"bound_factor must be >= 1.0, got {self.bound_factor}")
        if self.load_floor_tokens < 0:
            raise ValueError(f"load_floor_tokens must be >= 0, got {self.load_floor_tokens}")

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        hashes = request.block_hashes
        key = hashes[0] if hashes else 0
        threshold = load_threshold(replicas, request.cost_tokens, self.bound_factor, self.load_floor_tokens)
        matches = {r.replica_id: matched_blocks(r.cached, hashes) for r in replicas}
        eligible = [r for r in replicas if r.load_tokens + request.cost_tokens <= threshold]
        if not eligible:
            chosen = _least_loaded(replicas, key)
            return Decision(chosen.replica_id, "load_bound_fallback", matches[chosen.replica_id])
        best = max(matches[r.replica_id] for r in eligible)
        if best > 0:
            chosen = _least_loaded([r for r in eligible if matches[r.replica_id] == best], key)
            return Decision(chosen.replica_id, "prefix_hit", best)
        if hashes:
            chosen = max(eligible, key=lambda r: (rendezvous_weight(r.replica_id, key), r.replica_id))
        else:
            chosen = _least_loaded(eligible, key)
        reason: Reason = "load_bound_fallback" if any(matches.values()) else "miss"
        return Decision(chosen.replica_id, reason, 0)


def make_policy(name: str, bound_factor: float = DEFAULT_BOUND_FACTOR,
                load_floor_tokens: int = DEFAULT_LOAD_FLOOR_TOKENS) -> RoutingPolicy:
    """Builds a policy by its command-line name."""
    if name == "round-robin":
        return RoundRobin()
    if name == "least-load":
        return LeastLoad()
    if name == "prefix-aware":
        return PrefixAware(bound_factor, load_floor_tokens)
    raise ValueError(f"unknown routing policy {name!r}; choose round-robin, least-load or prefix-aware")


POLICY_NAMES = ("round-robin", "least-load", "prefix-aware")
