"""New prefixes go to the eligible replica home to the fewest prefixes among those nearly as roomy as the roomiest:
the rule, its index, and its count.

Properties over random fleets (loads, capacities, cached chains, homes) for the plain scan (the ``FleetIndex``
deciding as it does is ``test_indexed_routing.py``'s, homes changing among the rest), and the gateway's count of the prefixes a replica is home to (``PrefixIndex.homes``) through its three sources.
"""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st
from support.polling import eventually

from shoal.gateway.fleet_index import FleetIndex
from shoal.gateway.prefix_index import PrefixIndex
from shoal.gateway.routing import (
    HOME_MARGIN_MISSES,
    Capacity,
    PrefixAware,
    ReplicaView,
    RouteRequest,
    cost_on,
    load,
    matched_blocks,
    total_load,
)
from shoal.local import metric
from shoal.protocol.block_hash import hash_blocks
from shoal.protocol.kv_events import KVEvent

BLOCK = 16
CHAINS = [hash_blocks([chain] * BLOCK + list(range(BLOCK * 5))) for chain in range(5)]  # 5 prompts, 6 blocks each
CAPACITIES = [None, Capacity(512, 4), Capacity(2048, 16)]


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[ReplicaView], RouteRequest]:
    """Replicas of mixed capacities holding random prefixes of the chains, with random loads and homes."""
    views = []
    for i in range(draw(st.integers(1, 8))):
        capacity = draw(st.sampled_from(CAPACITIES))
        sequences = draw(st.integers(0, 20))
        cached = {h for chain in CHAINS for h in chain[: draw(st.sampled_from([0, 0, 0, 2, 6]))]}
        homes = draw(st.integers(0, 4))
        views.append(ReplicaView(f"r{i}", draw(st.integers(0, 3_000)), cached, sequences, capacity, homes))
    chain, blocks = draw(st.integers(0, 4)), draw(st.integers(0, 6))
    output = draw(st.integers(0, 300))
    request = RouteRequest(CHAINS[chain][:blocks], blocks * BLOCK + draw(st.integers(1, 800)) + output, BLOCK, output)
    return views, request


policies = st.builds(PrefixAware, st.floats(1.0, 2.0), st.integers(0, 4_000))


def eligible(policy: PrefixAware, views: list[ReplicaView], request: RouteRequest) -> list[ReplicaView]:
    mean = (total_load(views) + request.cost_tokens) / len(views)
    return [
        v
        for v in views
        if policy.headroom(v, load(v), request, matched_blocks(v.cached, request.block_hashes), mean) >= 0
    ]


def headroom_of(policy: PrefixAware, views: list[ReplicaView], request: RouteRequest, view: ReplicaView) -> float:
    mean = (total_load(views) + request.cost_tokens) / len(views)
    return policy.headroom(view, load(view), request, 0, mean)


@given(fleets(), policies)
def test_a_prefix_no_eligible_replica_holds_goes_to_the_fewest_homes_among_those_nearly_as_roomy(
    fleet, policy: PrefixAware
) -> None:
    """Nearly as roomy: within ``HOME_MARGIN_MISSES`` of the request's own cost of the roomiest eligible one."""
    views, request = fleet
    decision = policy.decide(views, request)
    within = eligible(policy, views, request)
    if not within or any(matched_blocks(v.cached, request.block_hashes) for v in within):
        return
    rooms = {v.replica_id: headroom_of(policy, views, request, v) for v in within}
    top = max(rooms.values())
    near = [v for v in within if rooms[v.replica_id] >= top - HOME_MARGIN_MISSES * cost_on(v, request, 0)]
    chosen = next(v for v in views if v.replica_id == decision.replica_id)
    assert chosen in near
    assert chosen.homes == min(v.homes for v in near)
    assert rooms[chosen.replica_id] == max(rooms[v.replica_id] for v in near if v.homes == chosen.homes)
    assert decision.reason in ("miss", "load_bound_fallback")


@given(st.integers(0, 8), st.integers(1, 6), st.integers(1, 400))
def test_a_miss_skips_fewer_homes_on_a_replica_busier_than_the_margin_allows(
    busy: int, homes: int, prompt: int
) -> None:
    """Two replicas of one capacity, the one home to no prefix running ``busy`` more sequences: it takes a new
    prefix only while that leaves it within ``HOME_MARGIN_MISSES`` of its cost of the other."""
    capacity = Capacity(2048, 16)
    policy = PrefixAware()
    request = RouteRequest(CHAINS[0], 6 * BLOCK + prompt, BLOCK, 0)
    idle = ReplicaView("idle", 0, set(), 0, capacity, homes)
    busier = ReplicaView("busier", 0, set(), busy, capacity, 0)
    gap = busy * capacity.sequence_tokens
    decision = policy.decide([idle, busier], request)
    fewer_homes_near_enough = gap <= HOME_MARGIN_MISSES * cost_on(busier, request, 0)
    assert decision.replica_id == ("busier" if fewer_homes_near_enough else "idle")
    assert decision.reason == "miss"


@given(fleets(), policies)
def test_a_holder_within_its_bound_is_chosen_whatever_the_homes(fleet, policy: PrefixAware) -> None:
    views, request = fleet
    within = eligible(policy, views, request)
    best = max((matched_blocks(v.cached, request.block_hashes) for v in within), default=0)
    decision = policy.decide(views, request)
    if best:
        assert (decision.reason, decision.matched_blocks) == ("prefix_hit", best)


@given(fleets(), policies)
def test_the_bound_is_exceeded_by_at_most_one_request_and_only_when_no_replica_is_within_it(
    fleet, policy: PrefixAware
) -> None:
    """Chosen within its bound whenever some replica is; else the roomiest, which goes past its limit by less
    than the request's own cost only if it was within it before."""
    views, request = fleet
    decision = policy.decide(views, request)
    chosen = next(v for v in views if v.replica_id == decision.replica_id)
    mean = (total_load(views) + request.cost_tokens) / len(views)
    after = load(chosen) + cost_on(chosen, request, decision.matched_blocks)
    if eligible(policy, views, request):
        assert after <= policy.limit(chosen, mean) + 1e-9
    else:
        assert decision.reason == "load_bound_fallback"
        assert after > policy.limit(chosen, mean)


def test_eight_new_prefixes_on_four_idle_replicas_get_two_homes_each() -> None:
    """Each placement adds a home to the replica chosen (as the gateway's and the simulator's counts do), so an
    idle fleet takes new prefixes in turn instead of by the ring alone, plain scan and index alike."""
    for indexed in (False, True):
        views = [ReplicaView(f"r{i}", 0, set(), 0, Capacity(512, 4)) for i in range(4)]
        fleet: list[ReplicaView] = FleetIndex(views) if indexed else views
        for chain in range(8):
            prompt = hash_blocks([chain + 100] * BLOCK * 3)
            decision = PrefixAware().decide(fleet, RouteRequest(prompt, 3 * BLOCK + 8, BLOCK, 8))
            assert decision.reason == "miss"
            chosen = next(v for v in views if v.replica_id == decision.replica_id)
            chosen.homes += 1
            if isinstance(fleet, FleetIndex):
                fleet.changed(chosen)
        assert sorted(v.homes for v in views) == [2, 2, 2, 2]


def test_a_gateway_gives_real_engines_as_many_new_prefixes_each(engines, tiny_model_dir, gateways) -> None:
    """Six new system prompts one after another through a gateway to three idle real engines: two homes each
    (ranked on the ring alone, an idle fleet's homes fall where the prompts' hashes put them)."""
    handle = gateways([e.url for e in engines], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
    handle.wait_healthy(3)
    eventually(lambda: handle.gateway.prompts.tokenizer("tiny") is not None, 30, "the tokenizer")
    replicas = [handle.gateway.fleet.replicas[e.url] for e in engines]
    eventually(lambda: all(r.index.synced for r in replicas), 30, "every KV stream in sync")
    before = [metric(e.url, "shoal_engine_requests_finished_total") for e in engines]
    for n in range(6):
        prompt = f"System prompt {n} of the homes test: " + " ".join(f"word{n}x{i}" for i in range(40))
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 2}
        assert httpx.post(handle.url + "/v1/completions", json=body, timeout=60).status_code == 200
    served = [metric(e.url, "shoal_engine_requests_finished_total") - b for e, b in zip(engines, before, strict=True)]
    assert served == [2, 2, 2]
    eventually(lambda: [r.index.homes for r in replicas] == [2, 2, 2], 10, "two homes counted per replica")


def stored(seq: int, hashes: list[int]) -> KVEvent:
    return KVEvent(type="stored", seq=seq, hashes=hashes)


def test_the_gateway_counts_a_home_until_the_replica_is_known_not_to_hold_it() -> None:
    index = PrefixIndex(history_blocks=12)
    index.apply(KVEvent(type="snapshot", seq=0, hashes=[], block_size=BLOCK, engine_id="e"))
    a, b, c = CHAINS[0], CHAINS[1], CHAINS[2]
    index.routed(b)
    index.routed(a)
    index.routed(a)  # the same prefix again: still one home
    assert index.homes == 2
    index.finished(b)  # ended before its stored event arrived: still a home
    index.finished(a)
    index.finished(a)
    index.apply(stored(1, list(a)))
    assert index.homes == 2
    index.apply(KVEvent(type="removed", seq=2, hashes=list(a)))
    assert index.homes == 1
    index.routed(c)  # 6 more blocks push b's first block out of the 12-block history; never stored: gone
    index.finished(c)
    assert index.homes == 1
    assert b[0] not in index


def test_a_snapshot_or_a_lost_stream_recounts_the_homes_from_what_stands_for_the_cache() -> None:
    index = PrefixIndex(history_blocks=8)
    index.apply(KVEvent(type="snapshot", seq=0, hashes=list(CHAINS[0]), block_size=BLOCK, engine_id="e"))
    index.routed(CHAINS[0])
    index.routed(CHAINS[1])
    index.finished(CHAINS[0])
    index.finished(CHAINS[1])
    assert index.homes == 2
    index.apply(KVEvent(type="snapshot", seq=0, hashes=list(CHAINS[1]), block_size=BLOCK, engine_id="e2"))
    assert index.homes == 1  # the restarted engine holds only CHAINS[1]
    index.desync()  # the history stands in: it holds what was sent (CHAINS[1]'s 6 blocks)
    assert index.homes == 1
    index.routed(CHAINS[2])  # its 6 blocks push CHAINS[1]'s first block out of the 8-block history
    index.finished(CHAINS[2])
    assert index.homes == 1
    assert CHAINS[1][0] not in index and CHAINS[2][0] in index
