"""Following an engine's /kv/events: snapshot then events, resync on a gap, refusal of foreign hashing."""

from __future__ import annotations

import httpx
import pytest

from shoal.protocol.kv_events import KVEvent
from support.polling import eventually

pytestmark = pytest.mark.timeout(60)


def test_the_index_follows_events_and_resyncs_after_a_gap(fake_engines, gateways) -> None:
    (engine, server), = fake_engines(1)
    engine.kv_snapshot = [11, 12]
    handle = gateways([server.url])
    index = handle.gateway.fleet.replicas[server.url].index
    eventually(lambda: index.synced and index.cached == {11, 12}, 10, "the snapshot")
    engine.kv_events.append(KVEvent(type="stored", seq=1, hashes=[13]))
    engine.kv_events.append(KVEvent(type="removed", seq=2, hashes=[11]))
    eventually(lambda: index.cached == {12, 13}, 10, "stored and removed events")
    assert "shoal_gateway_backend_kv_events_synced{backend=\"%s\"} 1.0" % server.url in \
        httpx.get(handle.url + "/metrics").text
    engine.kv_snapshot = [20]
    engine.kv_events.append(KVEvent(type="stored", seq=9, hashes=[14]))  # seq 3..8 lost
    eventually(lambda: index.synced and index.cached == {20}, 10, "a fresh snapshot after the gap")


def test_an_engine_with_another_block_size_is_not_followed(fake_engines, gateways) -> None:
    (engine, server), = fake_engines(1)
    engine.kv_snapshot = [1]
    handle = gateways([server.url], block_size=32)
    handle.wait_healthy(1)
    follower = handle.gateway._followers[server.url]
    eventually(follower.done, 10, "the follower to give up")
    assert not handle.gateway.fleet.replicas[server.url].index.synced
