"""The routing load measure: sequences against announced capacity, uncached prefill tipping the balance, a floor
that follows the capacity.

Pure properties of ``PrefixAware`` (with an oracle written out here, not borrowed from the policy), the gateway's
lease accounting, and the capacity a real engine announces reaching the gateway.
"""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.devices import TEST_DEVICE
from support.polling import eventually

from shoal.engine.core.engine_config import EngineConfig
from shoal.gateway.replicas import Fleet, Replica
from shoal.gateway.routing import (
    Capacity,
    LeastLoad,
    PrefixAware,
    ReplicaView,
    RouteRequest,
    clockwise,
    cost_on,
    key_point,
    load,
    matched_blocks,
)
from shoal.protocol.block_hash import hash_blocks

BLOCK = 16
CHAIN = hash_blocks(list(range(BLOCK * 8)))  # 8 chained block hashes of one prompt

capacities = st.one_of(st.none(), st.builds(Capacity, st.integers(16, 4096), st.integers(1, 256)))


@st.composite
def fleets(draw: st.DrawFn, with_capacity: bool = False) -> tuple[list[ReplicaView], RouteRequest]:
    """Replicas holding random prefixes of one chain, with random loads, sequences and (maybe) capacities."""
    replicas = []
    for i in range(draw(st.integers(1, 6))):
        capacity = draw(
            st.builds(Capacity, st.integers(16, 4096), st.integers(1, 256)) if with_capacity else capacities
        )
        replicas.append(
            ReplicaView(
                f"http://10.0.0.{i}:8000",
                draw(st.integers(0, 20_000)),
                frozenset(CHAIN[: draw(st.integers(0, len(CHAIN)))]),
                draw(st.integers(0, 300)),
                capacity,
            )
        )
    blocks = draw(st.integers(0, len(CHAIN)))
    output = draw(st.integers(0, 2_000))
    prompt = draw(st.integers(blocks * BLOCK, blocks * BLOCK + 4_000))
    return replicas, RouteRequest(CHAIN[:blocks], prompt + output, draw(st.sampled_from([0, BLOCK])), output)


policies = st.builds(PrefixAware, st.floats(1.0, 3.0), st.integers(0, 10_000))


def oracle(replicas: list[ReplicaView], request: RouteRequest, policy: PrefixAware) -> dict[str, float]:
    """Headroom under the bound after taking the request, per replica, from the module docstring's definition."""

    def charge(r: ReplicaView) -> float:
        return r.capacity.token_budget / r.capacity.max_seqs if r.capacity else 0.0

    def held(r: ReplicaView) -> float:
        return r.load_tokens / r.capacity.max_seqs + r.sequences * charge(r) if r.capacity else r.load_tokens

    def cost(r: ReplicaView) -> float:
        matched = matched_blocks(r.cached, request.block_hashes)
        prefill = max(request.cost_tokens - request.output_tokens - request.block_size * matched, 0)
        return prefill / r.capacity.max_seqs + charge(r) if r.capacity else prefill + request.output_tokens

    mean = (sum(held(r) for r in replicas) + request.cost_tokens) / len(replicas)
    out = {}
    for r in replicas:
        limit = r.capacity.token_budget + charge(r) if r.capacity else 0.0  # max_seqs sequences + a step of prompt
        floor = limit / policy.bound_factor if r.capacity else policy.load_floor_tokens
        out[r.replica_id] = policy.bound_factor * max(mean, floor) - (held(r) + cost(r))
    return out


@given(fleets(), policies)
def test_the_bound_holds_whenever_some_replica_is_within_it(fleet, policy: PrefixAware) -> None:
    replicas, request = fleet
    decision = policy.decide(replicas, request)
    headroom = oracle(replicas, request, policy)
    within = {name for name, room in headroom.items() if room >= 0}
    if within:
        assert decision.replica_id in within
    else:
        assert decision.reason == "load_bound_fallback"
        assert headroom[decision.replica_id] == max(headroom.values())


@given(fleets(with_capacity=True), policies)
def test_affinity_holds_while_the_holder_stays_within_its_capacity(fleet, policy: PrefixAware) -> None:
    """At low load the floor (capacity / bound) governs: the longest holder keeps the prefix until it would queue."""
    replicas, request = fleet
    best = max(matched_blocks(r.cached, request.block_hashes) for r in replicas)
    holders = [r for r in replicas if matched_blocks(r.cached, request.block_hashes) == best]
    if best == 0 or not any(load(r) + cost_on(r, request, best) <= r.capacity.limit_tokens for r in holders):
        return
    decision = policy.decide(replicas, request)
    assert decision.reason == "prefix_hit" and decision.matched_blocks == best


@given(fleets(with_capacity=True), policies)
def test_the_bound_bites_before_a_replica_would_queue(fleet, policy: PrefixAware) -> None:
    """While the fleet is light (bound x mean below every budget), no replica is sent past its token budget when
    any replica could take the request within its own."""
    replicas, request = fleet
    mean = (sum(load(r) for r in replicas) + request.cost_tokens) / len(replicas)
    if policy.bound_factor * mean > min(r.capacity.limit_tokens for r in replicas):
        return

    def after(r: ReplicaView) -> float:
        return load(r) + cost_on(r, request, matched_blocks(r.cached, request.block_hashes))

    if not any(after(r) <= r.capacity.limit_tokens for r in replicas):
        return
    chosen = next(r for r in replicas if r.replica_id == policy.decide(replicas, request).replica_id)
    assert after(chosen) <= chosen.capacity.limit_tokens


@given(fleets(), policies)
def test_a_miss_goes_to_the_replica_left_furthest_under_its_bound(fleet, policy: PrefixAware) -> None:
    replicas, request = fleet
    decision = policy.decide(replicas, request)
    if decision.reason == "miss":
        headroom = oracle(replicas, request, policy)
        assert headroom[decision.replica_id] == pytest.approx(max(headroom.values()))


def test_a_new_prefix_goes_to_the_least_busy_replica_and_idle_ones_rank_on_the_ring() -> None:
    """Among replicas home to as many prefixes, the least busy takes a new one; an idle fleet (all alike) still
    sends it where every gateway would."""
    capacity = Capacity(token_budget=512, max_seqs=4)
    request = RouteRequest(CHAIN, cost_tokens=445 + 32, block_size=BLOCK, output_tokens=32)
    idle = [ReplicaView(name, capacity=capacity) for name in ("a", "b", "c", "d")]
    home = PrefixAware().decide(idle, request).replica_id
    assert home == min("abcd", key=lambda name: clockwise(name, key_point(CHAIN[0])))
    busy_home = [ReplicaView(v.replica_id, sequences=int(v.replica_id == home), capacity=capacity) for v in idle]
    moved = PrefixAware().decide(busy_home, request)
    assert moved.reason == "miss"
    assert moved.replica_id == min(
        (v.replica_id for v in idle if v.replica_id != home), key=lambda name: clockwise(name, key_point(CHAIN[0]))
    )


def test_a_holder_is_charged_only_what_it_must_prefill() -> None:
    request = RouteRequest(CHAIN, cost_tokens=200, block_size=BLOCK, output_tokens=50)  # 150 prompt tokens
    holder = ReplicaView("a", cached=frozenset(CHAIN[:4]), capacity=Capacity(512, 4))
    assert cost_on(holder, request, 4) == (150 - 4 * BLOCK) / 4 + 128  # uncached prompt / max_seqs + a sequence
    unknown = ReplicaView("b", cached=frozenset(CHAIN[:4]))
    assert cost_on(unknown, request, 4) == 150 - 4 * BLOCK + 50  # uncached prompt + its output budget


def test_a_replica_is_full_when_its_sequences_reach_max_seqs_and_a_budget_of_prompt_counts_as_one() -> None:
    capacity = Capacity(token_budget=512, max_seqs=4)
    assert load(ReplicaView("a", sequences=4, capacity=capacity)) == 512
    assert load(ReplicaView("a", load_tokens=512, capacity=capacity)) == 128
    assert load(ReplicaView("a", load_tokens=512, sequences=3, capacity=capacity)) == 512


def test_a_miss_longer_than_the_budget_still_fits_an_idle_replica_and_a_holder_takes_hits_until_it_is_full() -> None:
    """The bench's case (512-token budget, 4 sequences, ~445-token prompts): the earlier measure sent every miss
    and a holder's third hit through load_bound_fallback, to a replica without the prefix."""
    capacity = Capacity(token_budget=512, max_seqs=4)
    idle = [ReplicaView(name, capacity=capacity) for name in ("a", "b", "c", "d")]
    request = RouteRequest(CHAIN, cost_tokens=445 + 32, block_size=BLOCK, output_tokens=32)
    assert PrefixAware().decide(idle, request).reason == "miss"
    for running, expected in ((3, "a"), (4, None)):
        holder = ReplicaView("a", sequences=running, cached=frozenset(CHAIN), capacity=capacity)
        decision = PrefixAware().decide([holder, *idle[1:]], request)
        if expected:
            assert (decision.replica_id, decision.reason) == ("a", "prefix_hit")
        else:
            assert decision.replica_id != "a" and decision.reason == "load_bound_fallback"


def test_a_busy_holder_spills_before_it_queues_and_keeps_its_prefix_below_that() -> None:
    capacity = Capacity(token_budget=512, max_seqs=4)
    request = RouteRequest(CHAIN, cost_tokens=200, block_size=BLOCK, output_tokens=50)
    others = [ReplicaView(name, capacity=capacity) for name in ("b", "c", "d")]
    policy = PrefixAware()  # the default 4,096-token floor is not what applies to replicas with a capacity
    calm = ReplicaView("a", sequences=2, cached=frozenset(CHAIN), capacity=capacity)
    assert policy.decide([calm, *others], request).replica_id == "a"
    full = ReplicaView("a", sequences=4, cached=frozenset(CHAIN), capacity=capacity)
    spilled = policy.decide([full, *others], request)
    assert spilled.replica_id != "a" and spilled.reason == "load_bound_fallback"


def test_least_load_counts_sequences_against_capacity() -> None:
    capacity = Capacity(token_budget=512, max_seqs=4)
    busy = ReplicaView("a", load_tokens=0, sequences=3, capacity=capacity)
    prefilling = ReplicaView("b", load_tokens=100, sequences=1, capacity=capacity)
    assert LeastLoad().decide([busy, prefilling], RouteRequest()).replica_id == "b"


def test_bad_capacities_are_refused() -> None:
    with pytest.raises(ValueError, match="max_seqs=0"):
        Capacity(2048, 0)
    with pytest.raises(ValueError, match="token_budget=0"):
        Capacity(0, 8)


@st.composite
def lease_scripts(draw: st.DrawFn) -> tuple[Capacity | None, list[tuple[str, int]]]:
    """Acquire, first-byte and release steps on one replica, in any order a proxy could take them."""
    steps = draw(
        st.lists(st.tuples(st.sampled_from(["acquire", "prefilled", "release"]), st.integers(0, 10)), max_size=40)
    )
    return draw(capacities), steps


@given(lease_scripts(), st.sampled_from([0, BLOCK]))
def test_leases_charge_what_is_outstanding_and_give_it_all_back(script, block_size: int) -> None:
    capacity, steps = script
    replica = Replica("http://r", capacity=capacity)
    replica.index.routed(CHAIN[:3])  # a lease's own prefix counts as held: the charge is fixed at acquire
    leases = []
    for action, n in steps:
        if action == "acquire":
            request = RouteRequest(CHAIN[: n % 5], cost_tokens=100 + n * BLOCK, block_size=block_size, output_tokens=n)
            leases.append(Fleet.acquire(replica, request, min(n % 5, 3)))
        elif leases and action == "prefilled":
            Fleet.prefilled(leases[n % len(leases)])
        elif leases:
            Fleet.release(leases.pop(n % len(leases)))
        assert replica.load_tokens == sum(lease.prefill_tokens + lease.held_tokens for lease in leases) >= 0
        assert replica.in_flight == len(leases)
        if capacity is not None:
            assert all(lease.held_tokens == 0 for lease in leases)  # sequences count through ``in_flight``
    for lease in leases:
        Fleet.release(lease)
    assert replica.load_tokens == 0 and replica.in_flight == 0


def test_real_engines_announce_their_capacity_to_the_gateway(engines, gateways) -> None:
    defaults = EngineConfig(model="unused", device=TEST_DEVICE)
    card = httpx.get(engines[0].url + "/v1/models").json()["data"][0]
    assert (card["max_num_batched_tokens"], card["max_num_seqs"]) == (
        defaults.max_num_batched_tokens,
        defaults.max_num_seqs,
    )
    handle = gateways([engines[0].url])
    handle.wait_healthy(1)
    replica = handle.gateway.fleet.replicas[engines[0].url]
    assert replica.capacity == Capacity(defaults.max_num_batched_tokens, defaults.max_num_seqs)


@pytest.mark.parametrize("capacity", [None, Capacity(512, 4)])
def test_a_stream_stops_counting_its_prompt_once_its_first_token_is_back(fake_engines, gateways, capacity) -> None:
    ((engine, server),) = fake_engines(1)
    engine.tokens, engine.token_delay = 6, 0.3
    if capacity is not None:
        engine.card = {"max_num_batched_tokens": capacity.token_budget, "max_num_seqs": capacity.max_seqs}
    handle = gateways([server.url])
    handle.wait_healthy(1)
    replica = handle.gateway.fleet.replicas[server.url]
    assert replica.capacity == capacity
    body = {"model": "tiny", "prompt": "x" * 300, "max_tokens": 40, "stream": True}
    with httpx.stream("POST", handle.url + "/v1/completions", json=body, timeout=30) as response:
        chunks = response.iter_raw()
        next(chunks)  # the first token: the engine has prefilled the prompt
        assert replica.in_flight == 1
        assert replica.load_tokens == (0 if capacity else 40)  # what is left: a sequence, or its output budget
        for _ in chunks:
            pass
    eventually(lambda: replica.in_flight == 0 and replica.load_tokens == 0, 5, "the lease to be released")
