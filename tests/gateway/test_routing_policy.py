"""The routing policies as pure functions: the load bound, longest match, determinism, reasons."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.gateway.routing import (
    IdOrdered,
    LeastLoad,
    PrefixAware,
    ReplicaView,
    RoundRobin,
    RouteRequest,
    load_threshold,
    make_policy,
    matched_blocks,
)
from shoal.protocol.block_hash import hash_blocks

CHAIN = hash_blocks(list(range(16 * 8)))  # 8 chained block hashes of one prompt


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[ReplicaView], RouteRequest]:
    """Replicas holding random prefixes of one chain (plus noise), with random loads, and a request for it."""
    n = draw(st.integers(1, 6))
    replicas = []
    for i in range(n):
        prefix = draw(st.integers(0, len(CHAIN)))
        noise = draw(st.sets(st.integers(0, 2**64 - 1), max_size=3))
        load = draw(st.integers(0, 50_000))
        replicas.append(ReplicaView(f"http://10.0.0.{i}:8000", load, frozenset(CHAIN[:prefix]) | noise))
    blocks = draw(st.integers(0, len(CHAIN)))
    cost = draw(st.integers(1, 20_000))
    return replicas, RouteRequest(CHAIN[:blocks], cost)


policy_settings = st.builds(PrefixAware, st.floats(1.0, 3.0), st.integers(0, 10_000))


@given(fleets(), policy_settings)
def test_the_bound_holds_whenever_some_replica_is_within_it(fleet, policy: PrefixAware) -> None:
    replicas, request = fleet
    decision = policy.decide(replicas, request)
    threshold = load_threshold(replicas, request.cost_tokens, policy.bound_factor, policy.load_floor_tokens)
    within = {r.replica_id for r in replicas if r.load_tokens + request.cost_tokens <= threshold}
    if within:
        assert decision.replica_id in within
    else:
        assert decision.reason == "load_bound_fallback"
        chosen = next(r for r in replicas if r.replica_id == decision.replica_id)
        assert chosen.load_tokens == min(r.load_tokens for r in replicas)


@given(fleets(), policy_settings)
def test_longest_match_among_eligible_wins_and_ties_go_to_least_loaded(fleet, policy: PrefixAware) -> None:
    replicas, request = fleet
    decision = policy.decide(replicas, request)
    threshold = load_threshold(replicas, request.cost_tokens, policy.bound_factor, policy.load_floor_tokens)
    eligible = [r for r in replicas if r.load_tokens + request.cost_tokens <= threshold]
    if not eligible:
        return
    best = max(matched_blocks(r.cached, request.block_hashes) for r in eligible)
    chosen = next(r for r in replicas if r.replica_id == decision.replica_id)
    assert matched_blocks(chosen.cached, request.block_hashes) == best == decision.matched_blocks
    if best > 0:
        assert decision.reason == "prefix_hit"
        tied = [r for r in eligible if matched_blocks(r.cached, request.block_hashes) == best]
        assert chosen.load_tokens == min(r.load_tokens for r in tied)
    else:
        assert decision.reason in ("miss", "load_bound_fallback")


@given(fleets(), policy_settings, st.randoms())
def test_two_gateways_with_the_same_snapshot_choose_the_same(fleet, policy: PrefixAware, rng) -> None:
    """Active-active: the answer depends on the snapshot, not on the order replicas were discovered in."""
    replicas, request = fleet
    other = PrefixAware(policy.bound_factor, policy.load_floor_tokens)
    shuffled = list(replicas)
    rng.shuffle(shuffled)
    assert policy.decide(replicas, request) == other.decide(shuffled, request)


@given(fleets())
def test_least_load_picks_a_least_loaded_replica(fleet) -> None:
    replicas, request = fleet
    decision = LeastLoad().decide(replicas, request)
    chosen = next(r for r in replicas if r.replica_id == decision.replica_id)
    assert chosen.load_tokens == min(r.load_tokens for r in replicas)


def test_round_robin_visits_every_replica_in_turn() -> None:
    replicas = [ReplicaView(f"r{i}") for i in (2, 0, 1)]
    policy = RoundRobin()
    picks = [policy.decide(replicas, RouteRequest()).replica_id for _ in range(6)]
    assert picks == ["r0", "r1", "r2", "r0", "r1", "r2"]


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=3), st.integers(0, 3)),
        min_size=1,
        max_size=8,
        unique_by=lambda pair: pair[0],
    ),
    st.integers(1, 20),
)
def test_views_kept_in_id_order_are_served_as_any_order_is(replicas, picks: int) -> None:
    """``IdOrdered`` only spares the sort: round-robin and least-load pick the same as over a shuffled list."""
    views = [ReplicaView(name, load) for name, load in replicas]
    ordered = IdOrdered(sorted(views, key=lambda view: view.replica_id))
    for policy in (RoundRobin, LeastLoad):
        given_order, kept_order = policy(), policy()
        assert [given_order.decide(views, RouteRequest()).replica_id for _ in range(picks)] == [
            kept_order.decide(ordered, RouteRequest()).replica_id for _ in range(picks)
        ]


def test_a_hot_prefix_spills_over_once_its_replica_exceeds_the_bound() -> None:
    """Affinity holds while the holder is within 1.25 x mean; beyond it the request goes elsewhere."""
    policy = PrefixAware(bound_factor=1.25, load_floor_tokens=0)
    holder = ReplicaView("a", 1000, frozenset(CHAIN))
    others = [ReplicaView("b", 1000), ReplicaView("c", 1000)]
    request = RouteRequest(CHAIN, 100)
    assert policy.decide([holder, *others], request).reason == "prefix_hit"
    busy_holder = ReplicaView("a", 2000, frozenset(CHAIN))
    spilled = policy.decide([busy_holder, *others], request)
    assert spilled.replica_id in ("b", "c")
    assert spilled.reason == "load_bound_fallback"


def test_the_load_floor_keeps_a_few_requests_from_counting_as_imbalance() -> None:
    holder = ReplicaView("a", 600, frozenset(CHAIN))
    others = [ReplicaView("b", 0), ReplicaView("c", 0)]
    request = RouteRequest(CHAIN, 300)
    assert PrefixAware(load_floor_tokens=4096).decide([holder, *others], request).replica_id == "a"
    assert PrefixAware(load_floor_tokens=0).decide([holder, *others], request).replica_id != "a"


def test_a_new_prefix_lands_on_the_same_replica_from_any_gateway() -> None:
    replicas = [ReplicaView(f"r{i}") for i in range(4)]
    first = PrefixAware().decide(replicas, RouteRequest(CHAIN[:2], 50))
    assert first.reason == "miss"
    assert all(PrefixAware().decide(list(reversed(replicas)), RouteRequest(CHAIN[:2], 50)) == first for _ in range(3))


def test_bad_settings_and_names_are_refused() -> None:
    with pytest.raises(ValueError, match="bound_factor"):
        PrefixAware(bound_factor=0.5)
    with pytest.raises(ValueError, match="unknown routing policy"):
        make_policy("random")
