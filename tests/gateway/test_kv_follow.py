"""Following an engine's /kv/events: snapshot then events, resync on a gap, block sizes shown."""

from __future__ import annotations

import httpx
import pytest
from support.polling import eventually

from shoal.gateway.block_size import hashing_block_size, mismatch
from shoal.protocol.kv_events import KVEvent

pytestmark = pytest.mark.timeout(60)


def test_the_index_follows_events_and_resyncs_after_a_gap(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.kv_snapshot = [11, 12]
    handle = gateways([server.url])
    index = handle.gateway.fleet.replicas[server.url].index
    eventually(lambda: index.synced and index.cached == {11, 12}, 10, "the snapshot")
    engine.kv_events.append(KVEvent(type="stored", seq=1, hashes=[13]))
    engine.kv_events.append(KVEvent(type="removed", seq=2, hashes=[11]))
    eventually(lambda: index.cached == {12, 13}, 10, "stored and removed events")
    assert (
        f'shoal_gateway_backend_kv_events_synced{{backend="{server.url}"}} 1.0'
        in httpx.get(handle.url + "/metrics").text
    )
    engine.kv_snapshot = [20]
    engine.kv_events.append(KVEvent(type="stored", seq=9, hashes=[14]))  # seq 3..8 lost
    eventually(lambda: index.synced and index.cached == {20}, 10, "a fresh snapshot after the gap")


def test_an_engine_with_another_block_size_is_followed_and_shown_as_a_mismatch(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.kv_snapshot = [1]
    handle = gateways([server.url], block_size=32)
    handle.wait_healthy(1)
    replica = handle.gateway.fleet.replicas[server.url]
    eventually(lambda: replica.index.synced and replica.index.cached == {1}, 10, "the snapshot")
    assert replica.block_size == 16
    assert (
        f'shoal_gateway_backend_block_size_mismatch{{backend="{server.url}"}} 16.0'
        in httpx.get(handle.url + "/metrics").text
    )


def test_the_block_size_to_hash_with_is_the_one_the_replicas_agree_on() -> None:
    assert hashing_block_size([8, 8, None], expected=16) == 8
    assert hashing_block_size([None], expected=16) == 16
    assert hashing_block_size([8, 32], expected=16) == 16  # they disagree: the expected one
    assert mismatch(8, 16) and not mismatch(16, 16) and not mismatch(None, 16)
