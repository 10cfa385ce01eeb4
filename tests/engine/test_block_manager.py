"""The block manager: allocation, sharing by prefix hash, lazy LRU eviction, KV events."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from kv_invariants import assert_all_free, assert_consistent

from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.request import Request
from shoal.engine.core.sampling_params import SamplingParams
from shoal.protocol.block_hash import hash_blocks

_ids = itertools.count()


def _request(tokens: list[int]) -> Request:
    return Request(f"r{next(_ids)}", tokens, SamplingParams(), arrival_time=0.0)


def _admit(bm: BlockManager, request: Request) -> bool:
    """What the scheduler does for a whole prompt: reuse the cached prefix, allocate the rest."""
    blocks, cached = bm.get_computed_blocks(request)
    if not bm.allocate_slots(request, request.num_tokens - cached, blocks):
        return False
    request.num_computed_tokens = request.num_tokens
    return True


def test_shared_prefix_reuses_blocks_and_recomputes_last_token() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    first = _request(list(range(12)))
    assert _admit(bm, first)
    second = _request(list(range(12)))
    blocks, cached = bm.get_computed_blocks(second)
    assert blocks == first.block_ids[:2] and cached == 8  # the last full block is left to recompute its token
    assert bm.allocate_slots(second, 4, blocks)
    assert second.num_computed_tokens == 8 and second.num_cached_tokens == 8
    assert [bm.blocks[b].ref_count for b in first.block_ids] == [2, 2, 1]
    assert bm.cached_hashes() == hash_blocks(list(range(12)), 4)  # the gateway's own computation
    bm.free(first)
    bm.free(second)
    assert_all_free(bm)


def test_freed_blocks_keep_their_hash_until_reused_tail_first() -> None:
    bm = BlockManager(num_blocks=4, block_size=2)
    a = _request([1, 2, 3, 4, 5, 6, 7])
    assert _admit(bm, a)
    first_block = a.block_ids[0]
    bm.free(a)
    assert len(bm.cached_hashes()) == 3  # freed, still cached
    bm.drain_events()
    b = _request([9, 9, 9])  # needs 2 blocks: the free one and then a's tail
    assert _admit(bm, b)
    removed = [h for kind, hashes in bm.drain_events() if kind == "removed" for h in hashes]
    assert removed == [hash_blocks([1, 2, 3, 4, 5, 6], 2)[2]]  # the end of the chain goes first
    c = _request([1, 2, 3])  # its first block is still cached on a free block: taken back
    blocks, cached = bm.get_computed_blocks(c)
    assert blocks == [first_block] and cached == 2 and bm.blocks[first_block].ref_count == 0
    assert bm.allocate_slots(c, 1, blocks)
    assert bm.num_free_blocks == 0
    assert_consistent(bm, [b, c])


def test_allocation_is_all_or_nothing() -> None:
    bm = BlockManager(num_blocks=3, block_size=4)
    a = _request(list(range(8)))
    assert _admit(bm, a)
    b = _request(list(range(100, 108)))
    assert not bm.allocate_slots(b, 8)
    assert b.block_ids == [] and bm.num_free_blocks == 1
    assert_consistent(bm, [a])


def test_disabled_prefix_caching_shares_nothing() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    a, b = _request(list(range(9))), _request(list(range(9)))
    assert _admit(bm, a) and _admit(bm, b)
    assert set(a.block_ids).isdisjoint(b.block_ids) and bm.cached_hashes() == []


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.lists(st.integers(0, 2), min_size=1, max_size=14)),
        st.tuples(st.just("grow"), st.integers(0, 20), st.lists(st.integers(0, 2), min_size=1, max_size=5)),
        st.tuples(st.just("free"), st.integers(0, 20)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=_ops,
    num_blocks=st.integers(1, 12),
    block_size=st.integers(1, 4),
    window=st.one_of(st.none(), st.integers(1, 10)),
)
def test_random_workloads_keep_the_books_consistent(
    ops: list, num_blocks: int, block_size: int, window: int | None
) -> None:
    bm = BlockManager(num_blocks, block_size, sliding_window=window)
    live: list[Request] = []
    stored: set[int] = set()
    for op in ops:
        if op[0] == "admit":
            request = _request(op[1])
            if _admit(bm, request):
                live.append(request)
            else:
                assert request.block_ids == []
        elif op[0] == "grow" and live:
            request = live[op[1] % len(live)]
            request.all_token_ids.extend(op[2])
            if bm.allocate_slots(request, len(op[2])):
                request.num_computed_tokens = request.num_tokens
            else:
                del request.all_token_ids[request.num_computed_tokens :]
        elif op[0] == "free" and live:
            bm.free(live.pop(op[1] % len(live)))
        for kind, hashes in bm.drain_events():
            (stored.update if kind == "stored" else stored.difference_update)(hashes)
        assert stored == set(bm.cached_hashes())  # the event stream replays to the snapshot
        assert_consistent(bm, live)
        if window is not None:  # every block the next query can see is still held
            for request in live:
                first_visible = max(request.num_computed_tokens - window + 1, 0)
                assert request.num_dropped_blocks * block_size <= first_visible
    for request in live:
        bm.free(request)
    assert_all_free(bm)


def test_a_sliding_window_holds_about_a_window_of_blocks_and_freed_blocks_still_hit() -> None:
    bm = BlockManager(num_blocks=16, block_size=4, sliding_window=6)
    assert bm.num_cache_blocks == 17 and bm.null_block == 16
    long = _request(list(range(5)))
    assert _admit(bm, long)
    for token in range(5, 40):  # decode one token at a time: 40 tokens = 10 blocks
        long.all_token_ids.append(token)
        assert bm.allocate_slots(long, 1)
        long.num_computed_tokens = long.num_tokens
        live = [b for b in long.block_ids if b != bm.null_block]
        assert len(live) <= -(-(6 + 1) // 4) + 1  # the window (plus the token being written) spans <= 3 blocks
        assert_consistent(bm, [long])
    assert long.block_ids[: long.num_dropped_blocks] == [bm.null_block] * long.num_dropped_blocks
    assert bm.num_free_blocks >= 16 - 3
    early = _request(list(range(9)))  # the first two blocks were released with their hashes: still a prefix hit
    blocks, cached = bm.get_computed_blocks(early)
    assert cached == 8 and all(bm.blocks[b].ref_count == 0 for b in blocks)
    bm.free(long)
    assert_all_free(bm)


def test_without_a_window_nothing_is_released() -> None:
    bm = BlockManager(num_blocks=8, block_size=2)
    request = _request(list(range(12)))
    assert _admit(bm, request) and bm.allocate_slots(request, 0)
    assert request.num_dropped_blocks == 0 and len(request.block_ids) == 6 and bm.num_cache_blocks == 8
