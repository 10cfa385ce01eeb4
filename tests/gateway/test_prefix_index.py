"""A replica's prefix index: exact from KV events, in-flight prefixes on top, routing history while out of sync."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.gateway.prefix_index import EventGap, PrefixIndex
from shoal.protocol.kv_events import KVEvent


def snapshot(hashes: list[int], seq: int = 0) -> KVEvent:
    return KVEvent(type="snapshot", seq=seq, hashes=hashes, block_size=16, engine_id="e1")


def test_events_applied_in_order_track_the_engine_exactly() -> None:
    index = PrefixIndex()
    index.apply(snapshot([1, 2]))
    index.apply(KVEvent(type="stored", seq=1, hashes=[3]))
    index.apply(KVEvent(type="removed", seq=2, hashes=[1]))
    assert (1 in index, 2 in index, 3 in index) == (False, True, True)


def test_a_gap_desyncs_and_the_history_stands_in_until_the_next_snapshot() -> None:
    index = PrefixIndex()
    index.apply(snapshot([7]))
    index.routed([100, 101])
    index.finished([100, 101])
    assert 100 not in index  # in sync: only what the engine reported counts
    with pytest.raises(EventGap):
        index.apply(KVEvent(type="stored", seq=5, hashes=[8]))
    assert not index.synced
    assert 100 in index and 7 not in index
    index.apply(snapshot([7, 8], seq=0))
    assert index.synced and 8 in index and 100 not in index


def test_in_flight_prefixes_count_until_their_requests_finish() -> None:
    index = PrefixIndex()
    index.apply(snapshot([]))
    index.routed([5, 6])
    index.routed([5])
    index.finished([5, 6])
    assert 5 in index and 6 not in index
    index.finished([5])
    assert 5 not in index


@given(st.lists(st.lists(st.integers(0, 50), max_size=5), max_size=30), st.integers(1, 20))
def test_the_history_is_bounded_and_keeps_the_most_recent(batches: list[list[int]], capacity: int) -> None:
    index = PrefixIndex(history_blocks=capacity)
    for batch in batches:
        index.routed(batch)
        index.finished(batch)
    recent: list[int] = []
    for batch in reversed(batches):
        for h in reversed(batch):
            if h not in recent:
                recent.append(h)
    expected = set(recent[:capacity])
    assert {h for h in range(51) if h in index} == expected
