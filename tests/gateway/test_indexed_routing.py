"""Prefix-aware routing over a ``FleetIndex`` decides exactly as the plain scan over the same views.

Hypothesis drives a fleet through random changes (loads, sequences, what each replica caches, the prefixes it
is home to, rotation changes), telling the index as the simulator does, and asks both paths for a decision after every change.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.gateway.fleet_index import FleetIndex
from shoal.gateway.routing import Capacity, PrefixAware, ReplicaView, RouteRequest, _Terms, load, total_load
from shoal.protocol.block_hash import hash_blocks

BLOCK = 16
CHAINS = [hash_blocks([chain] * BLOCK + list(range(BLOCK * 6))) for chain in range(4)]  # 4 prompts, 7 blocks each
CAPACITIES = [None, Capacity(512, 4), Capacity(2048, 16)]

changes = st.one_of(
    st.tuples(st.just("load"), st.integers(0, 11), st.integers(0, 3_000), st.integers(0, 20)),
    st.tuples(st.just("cache"), st.integers(0, 11), st.integers(0, 3), st.integers(0, 7)),
    st.tuples(st.just("rotation"), st.integers(0, 11), st.integers(1, 12), st.just(0)),
    st.tuples(st.just("capacity"), st.integers(0, 11), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("homes"), st.integers(0, 11), st.just(0), st.integers(0, 4)),
)
requests = st.builds(
    lambda chain, blocks, prompt, output, block_size: RouteRequest(
        CHAINS[chain][:blocks], blocks * BLOCK + prompt + output, block_size, output
    ),
    st.integers(0, 3),
    st.integers(0, 7),
    st.integers(0, 2_000),
    st.integers(0, 500),
    st.sampled_from([0, BLOCK]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=12),
    st.lists(st.tuples(changes, requests), max_size=25),
    st.builds(PrefixAware, st.floats(1.0, 2.0), st.integers(0, 4_000)),
)
def test_the_indexed_decision_is_the_plain_scans(replicas, script, policy: PrefixAware) -> None:
    """Equal loads (ties broken on the ring), holders of several chains, mixed capacities, homes changing across
    levels of equal load: the decision, its reason and its matched blocks are the same, and so is the fleet's
    total load."""
    views = [
        ReplicaView(f"r{i:02d}", sequences * 100, set(), sequences, CAPACITIES[capacity], homes)
        for i, (capacity, sequences, homes) in enumerate(replicas)
    ]
    index = FleetIndex(views)
    rotation = list(views)
    for (kind, who, a, b), request in script:
        view = views[who % len(views)]
        if kind == "load":
            view.load_tokens, view.sequences = a, b
            index.changed(view)
        elif kind == "cache":
            cached = view.cached
            assert isinstance(cached, set)
            cached.difference_update(CHAINS[a])
            cached.update(CHAINS[a][:b])
            if b:
                index.may_hold(view, CHAINS[a][0])
        elif kind == "rotation":
            rotation = [v for i, v in enumerate(views) if (i + who) % len(views) < a]
            index.reset(rotation)
        elif kind == "homes":
            view.homes = b
            index.changed(view)
        else:
            view.capacity = CAPACITIES[a]
            index.changed(view)
        if not rotation:
            continue
        assert index.total_load() == total_load(rotation)
        assert policy.decide(index, request) == policy.decide(list(rotation), request)


def test_the_lightest_of_many_replicas_is_found_without_looking_at_the_others() -> None:
    """A holder over its bound spills to the least loaded replica, found from the heap, not by a scan: one
    replica of each of the two lightest loads is looked at, not the 298 others."""
    capacity = Capacity(512, 4)
    views = [ReplicaView(f"r{i:03d}", 0, set(), 3, capacity) for i in range(300)]
    views[123].sequences = 1
    views[7].sequences, views[7].cached = 4, set(CHAINS[0])
    index = FleetIndex(views)
    index.may_hold(views[7], CHAINS[0][0])
    looked: list[str] = []
    policy = PrefixAware()

    def spy(view: ReplicaView, held: float) -> float:
        looked.append(view.replica_id)
        assert held == load(view)
        return policy.headroom(view, held, request, 0, 0.0)

    request = RouteRequest(CHAINS[0], 7 * BLOCK + 40, BLOCK, 8)
    decision = policy.decide(index, request)
    assert (decision.replica_id, decision.reason) == ("r123", "load_bound_fallback")
    assert decision == policy.decide(list(views), request)
    index.roomiest_others({"r007"}, spy, 0)
    assert looked == ["r123", looked[1]]  # the lightest, then one of the next load to see it is alone at the top


def test_a_replica_that_no_longer_holds_a_prefix_is_not_counted_as_its_holder() -> None:
    """The index may say too much (told at routing, evicted since): each query checks the replica's own cache."""
    views = [ReplicaView(name, 0, set(), 0, Capacity(512, 4)) for name in ("a", "b")]
    index = FleetIndex(views)
    views[0].cached.update(CHAINS[1])  # type: ignore[attr-defined]
    index.may_hold(views[0], CHAINS[1][0])
    request = RouteRequest(CHAINS[1], 7 * BLOCK + 40, BLOCK, 8)
    assert PrefixAware().decide(index, request).reason == "prefix_hit"
    views[0].cached.clear()  # type: ignore[attr-defined]
    assert PrefixAware().decide(index, request) == PrefixAware().decide(list(views), request)
    assert PrefixAware().decide(index, request).reason == "miss"
    assert index.holders(CHAINS[1][0]) == []


def test_when_no_replica_is_within_its_bound_a_holder_over_it_still_competes() -> None:
    """A holder over its bound even with every block matched is left out of the search for eligible replicas,
    but when none is eligible the roomiest of all takes the request, and here that is the holder."""
    holder = ReplicaView("a", 1100, set(CHAINS[2]))
    others = [ReplicaView(name, 1000) for name in ("b", "c")]
    index = FleetIndex([holder, *others])
    index.may_hold(holder, CHAINS[2][0])
    request = RouteRequest(CHAINS[2], 7 * BLOCK + 48, BLOCK, 8)
    policy = PrefixAware(bound_factor=1.0, load_floor_tokens=0)
    decision = policy.decide(index, request)
    assert (decision.replica_id, decision.reason, decision.matched_blocks) == ("a", "load_bound_fallback", 7)
    assert decision == policy.decide([holder, *others], request)


def test_a_heavier_holder_is_matched_only_when_it_could_win() -> None:
    """Twenty holders of a prefix, all under their bound. Walked lightest first: the lightest is matched, then
    one as light (a tie on headroom), then the heavier one holding the block past their match (it matches
    longer and wins); the other seventeen are passed by a set lookup or two. Walked heaviest first (the index
    walks a set, in no order): the two heaviest, then the winner, and the lighter ones lack the block before
    its match. The decision is the scan's."""
    capacity = Capacity(512, 4)
    views = [ReplicaView(f"r{i:02d}", 0, set(), 1 + i // 2, capacity) for i in range(40)]
    for view in views[:20]:
        view.cached = set(CHAINS[3][:3])
    views[17].cached = set(CHAINS[3][:6])
    views[1].sequences = 1  # as light as r00
    index = FleetIndex(views)
    for view in views[:20]:
        index.may_hold(view, CHAINS[3][0])
    request = RouteRequest(CHAINS[3], 7 * BLOCK + 40, BLOCK, 8)
    policy = PrefixAware()
    decision = policy.decide(index, request)
    assert (decision.replica_id, decision.reason, decision.matched_blocks) == ("r17", "prefix_hit", 6)
    assert decision == policy.decide(list(views), request)
    mean = (index.total_load() + request.cost_tokens) / len(index)
    lightest_first = sorted(index.holders(CHAINS[3][0]), key=lambda holder: (holder[1], holder[0].replica_id))
    for order, expected in ((lightest_first, ["r00", "r01", "r17"]), (lightest_first[::-1], ["r19", "r18", "r17"])):
        matched, beyond = PrefixAware._holders_that_could_win(order, _Terms(policy, request, mean))
        assert [view.replica_id for view, _, _ in matched] == expected
        assert beyond == []
