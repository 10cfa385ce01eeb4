"""vLLM's KV events read as Shoal's: recorded-format tests.

The batches are built with msgpack in the layout vLLM 0.32 publishes (``vllm/distributed/kv_events.py``: an
``EventBatch`` array ``[ts, events, dp_rank]``, each event a map tagged ``type``, sent as ``[topic, seq, payload]``
on a PUB socket); the real vLLM CPU server publishing them is in ``tests/gateway/test_vllm_kv_routing.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import msgpack
import pytest
import zmq
import zmq.asyncio

from shoal.engine_kinds.vllm import KV_EVENTS_TOPIC
from shoal.gateway import vllm_kv_follower
from shoal.gateway.prefix_index import PrefixIndex
from shoal.gateway.replicas import Fleet, Replica
from shoal.gateway.vllm_kv_events import MissedBatches, VllmCacheView, decode_batch
from shoal.protocol.block_hash import adapter_extra_key, hash_blocks
from shoal.protocol.kv_events import KVEvent

BLOCK = 16
TOKENS = list(range(100, 164))  # four whole blocks


def vllm_hash(parent: bytes | None, tokens: list[int]) -> bytes:
    """A stand-in for vLLM's SHA-256 block hash: opaque bytes, chained like the real ones."""
    return hashlib.sha256((parent or b"") + repr(tokens).encode()).digest()


def vllm_chain(tokens: list[int], parent: bytes | None = None) -> list[bytes]:
    hashes = []
    for start in range(0, len(tokens), BLOCK):
        parent = vllm_hash(parent, tokens[start : start + BLOCK])
        hashes.append(parent)
    return hashes


def stored(hashes: list[Any], parent: Any, tokens: list[int], block_size: int = BLOCK, **fields: Any) -> dict[str, Any]:
    """A ``BlockStored`` as vLLM 0.32 encodes it (``omit_defaults`` drops the unset optional fields)."""
    event = {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": block_size,
        "lora_id": None,
        "medium": "CPU",
        "lora_name": None,
        "group_idx": 0,
    }
    return event | fields


def removed(hashes: list[Any]) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "CPU", "group_idx": 0}


def batch(*events: dict[str, Any]) -> bytes:
    return msgpack.packb([1764230400.5, list(events), None])


def frames(seq: int, *events: dict[str, Any]) -> list[bytes]:
    return [KV_EVENTS_TOPIC.encode(), seq.to_bytes(8, "big"), batch(*events)]


def follow(view: VllmCacheView, index: PrefixIndex, seq: int, *events: dict[str, Any]) -> list[KVEvent]:
    out = view.receive(seq, decode_batch(batch(*events)))
    for event in out:
        index.apply(event)
    return out


def test_stored_blocks_are_named_with_the_chain_the_gateway_computes() -> None:
    view, index = VllmCacheView(), PrefixIndex()
    first, rest = vllm_chain(TOKENS[:32]), vllm_chain(TOKENS[32:], vllm_chain(TOKENS[:32])[-1])
    follow(view, index, 0, stored(first, None, TOKENS[:32]))
    follow(view, index, 1, stored(rest, first[-1], TOKENS[32:]))
    assert index.synced and index.cached == set(hash_blocks(TOKENS, BLOCK))
    assert view.block_size == BLOCK


def test_removed_blocks_leave_and_all_blocks_cleared_empties_the_replica() -> None:
    view, index = VllmCacheView(), PrefixIndex()
    chain = vllm_chain(TOKENS)
    ours = hash_blocks(TOKENS, BLOCK)
    follow(view, index, 0, stored(chain, None, TOKENS))
    follow(view, index, 1, removed(chain[2:]), removed([b"never stored"]))
    assert index.cached == set(ours[:2])
    follow(view, index, 2, {"type": "AllBlocksCleared"})
    assert index.synced and index.cached == set() and view.shoal_of == {}


def test_integer_hashes_map_as_bytes_do() -> None:
    """vLLM with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` publishes 64-bit integers."""
    view, index = VllmCacheView(), PrefixIndex()
    follow(view, index, 0, stored([7, 8], None, TOKENS[:32]), stored([9], 8, TOKENS[32:48]))
    assert index.cached == set(hash_blocks(TOKENS[:48], BLOCK))


def test_missed_batches_are_named_and_a_replay_overlapping_the_live_stream_is_applied_once() -> None:
    view, index = VllmCacheView(), PrefixIndex()
    chain = vllm_chain(TOKENS)
    follow(view, index, 0, stored(chain[:1], None, TOKENS[:16]))
    with pytest.raises(MissedBatches) as missed:
        follow(view, index, 2, stored(chain[2:3], chain[1], TOKENS[32:48]))  # seq 1 went by
    assert missed.value.start == 1 and view.synced and set(view.shoal_of) == set(chain[:1])  # nothing applied
    follow(view, index, 1, stored(chain[1:2], chain[0], TOKENS[16:32]))  # from vLLM's replay socket
    follow(view, index, 2, stored(chain[2:3], chain[1], TOKENS[32:48]))
    view.replayed(1)
    assert follow(view, index, 2, stored(chain[2:3], chain[1], TOKENS[32:48])) == []  # the same batch, live
    assert index.synced and index.cached == set(hash_blocks(TOKENS[:48], BLOCK))
    follow(view, index, 3, removed(chain[2:3]))  # the live stream goes on: the replayed window closes
    with pytest.raises(MissedBatches) as restarted:  # so a low seq now is a publisher that started over
        follow(view, index, 2, stored(chain[:1], None, TOKENS[:16]))
    assert restarted.value.start == 0


def test_a_follower_joining_late_asks_for_everything_and_a_missed_restart_too() -> None:
    view, index = VllmCacheView(), PrefixIndex()
    chain = vllm_chain(TOKENS)
    with pytest.raises(MissedBatches) as late:
        follow(view, index, 41, stored(chain[:2], None, TOKENS[:32]))
    assert late.value.start == 0
    follow(view, index, 0, stored(chain[:1], None, TOKENS[:16]))
    follow(view, index, 1, removed(chain[:1]))
    with pytest.raises(MissedBatches) as restarted:  # a lower seq, not replayed: a new publisher's first went by
        follow(view, index, 1, stored(chain[:1], None, TOKENS[:16]))
    assert restarted.value.start == 0


def test_given_up_the_history_stands_in_until_the_cache_is_known_again() -> None:
    view, index = VllmCacheView(), PrefixIndex()
    chain = vllm_chain(TOKENS)
    follow(view, index, 0, stored(chain[:1], None, TOKENS[:16]))
    view.give_up()  # the replay did not bring the missed batches back
    index.desync()  # as the follower does
    assert follow(view, index, 7, stored(chain[1:3], chain[0], TOKENS[16:48])) == []
    follow(view, index, 9, stored(chain[3:4], chain[2], TOKENS[48:64]))  # gaps no longer matter
    assert not index.synced and set(view.shoal_of) == set(chain)  # chains still known meanwhile
    follow(view, index, 10, {"type": "AllBlocksCleared"}, stored(chain[:1], None, TOKENS[:16]))
    assert index.synced and index.cached == set(hash_blocks(TOKENS[:16], BLOCK))


def test_what_shoals_chain_cannot_name_is_left_unmapped() -> None:
    view, index = VllmCacheView(), PrefixIndex()
    chain = vllm_chain(TOKENS)
    ours = hash_blocks(TOKENS, BLOCK)
    partial = stored([b"partial"], chain[0], TOKENS[16:24], block_size=8)  # a hybrid model's fine-grained entry
    salted = stored([b"salted"], None, TOKENS[:16], extra_keys=[["a-cache-salt"]])
    short = stored(chain[1:3], chain[0], TOKENS[16:36])  # tokens that do not fill its blocks
    orphan = stored(chain[3:4], b"unknown parent", TOKENS[48:64])
    follow(view, index, 0, stored(chain[:1], None, TOKENS[:16]), partial, salted, short, orphan)
    assert index.cached == {ours[0]} and view.block_size == BLOCK


def test_a_lora_adapters_blocks_carry_its_extra_key() -> None:
    view, index = VllmCacheView(), PrefixIndex()
    event = stored([b"l1"], None, TOKENS[:16], lora_id=1, lora_name="sql", extra_keys=[["sql"]])
    follow(view, index, 0, event)
    assert index.cached == set(hash_blocks(TOKENS[:16], BLOCK, adapter_extra_key("sql")))


@pytest.mark.parametrize(
    "payload",
    [b"\xc1", msgpack.packb({"ts": 1}), msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": "x"}]])],
    ids=["not-msgpack", "not-an-array", "bad-hashes"],
)
def test_a_batch_not_in_vllms_layout_is_refused(payload: bytes) -> None:
    with pytest.raises(ValueError):
        decode_batch(payload)


def test_an_event_kind_of_a_newer_vllm_is_skipped() -> None:
    assert decode_batch(batch({"type": "BlockPinned", "block_hashes": [b"a"]})) == []


def test_the_follower_shows_vllms_block_size_and_gives_up_on_a_batch_it_cannot_read() -> None:
    replica = Replica("http://127.0.0.1:1", kv_events_port=2)
    view = VllmCacheView()
    synced: list[bool] = []
    chain = vllm_chain(TOKENS)
    vllm_kv_follower.apply(
        replica, view, frames(0, stored(chain[:1], None, TOKENS[:16])), lambda _, s: synced.append(s)
    )
    assert replica.index.synced and replica.block_size == BLOCK and synced[-1] is True
    with pytest.raises(MissedBatches):
        vllm_kv_follower.apply(replica, view, frames(5, removed(chain[:1])), lambda _, s: synced.append(s))
    assert replica.index.synced  # until the replay says whether they can be had
    vllm_kv_follower.apply(replica, view, [b"only one frame"], lambda _, s: synced.append(s))
    assert not replica.index.synced and synced[-1] is False and view.lost


def test_an_ejected_replica_is_back_in_sync_at_its_next_batch_in_sequence() -> None:
    """Ejecting (a failed health check) desyncs the index; vLLM's sequence numbers say nothing was missed."""
    replica = Replica("http://127.0.0.1:1", kv_events_port=2)
    view = VllmCacheView()
    chain = vllm_chain(TOKENS)
    vllm_kv_follower.apply(replica, view, frames(0, stored(chain[:1], None, TOKENS[:16])), lambda *_: None)
    Fleet.eject(replica)
    assert not replica.index.synced
    vllm_kv_follower.apply(replica, view, frames(1, stored(chain[1:2], chain[0], TOKENS[16:32])), lambda *_: None)
    assert replica.index.synced and replica.index.cached == set(hash_blocks(TOKENS[:32], BLOCK))


def test_a_vllm_with_another_block_size_is_shown_and_hashed_with_its_size() -> None:
    """vLLM's CPU default is 128 tokens: the gateway (``--block-size 16``) logs the mismatch from this size."""
    replica = Replica("http://127.0.0.1:1", kv_events_port=2)
    big = stored([b"big"], None, TOKENS[:32], block_size=32)
    vllm_kv_follower.apply(replica, VllmCacheView(), frames(0, big), lambda *_: None)
    assert replica.block_size == 32 and replica.index.cached == set(hash_blocks(TOKENS[:32], 32))


async def test_the_follower_subscribes_to_the_replicas_publisher() -> None:
    """A stand-in publisher: a pyzmq PUB socket sending vLLM's frames, as vLLM's ZmqEventPublisher does."""
    context = zmq.asyncio.Context.instance()
    publisher = context.socket(zmq.PUB)
    port = publisher.bind_to_random_port("tcp://127.0.0.1")
    replica = Replica("http://127.0.0.1:1", kv_events_port=port)
    follower = asyncio.create_task(vllm_kv_follower.follow(replica, lambda *_: None))
    try:
        chain = vllm_chain(TOKENS)
        for _ in range(200):  # PUB drops what it sends before the subscription arrives: send until followed
            await publisher.send_multipart(frames(0, stored(chain, None, TOKENS)))
            if replica.index.synced:
                break
            await asyncio.sleep(0.05)
        assert replica.index.cached == set(hash_blocks(TOKENS, BLOCK))
        await publisher.send_multipart([b"another-topic", (1).to_bytes(8, "big"), batch(removed(chain))])
        await publisher.send_multipart(frames(1, removed(chain[3:])))
        for _ in range(100):
            if len(replica.index.cached) == 3:
                break
            await asyncio.sleep(0.02)
        assert replica.index.synced and replica.index.cached == set(hash_blocks(TOKENS[:48], BLOCK))
    finally:
        follower.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follower
        publisher.close(linger=0)


async def test_a_follower_subscribing_late_replays_what_vllm_published_before() -> None:
    """A stand-in vLLM: a PUB socket and its replay ROUTER on the next port, answering as vLLM's
    ``ZmqEventPublisher._service_replay`` does (``[id, "", topic, seq, payload]`` per batch, then seq -1)."""
    context = zmq.asyncio.Context.instance()
    publisher, router = context.socket(zmq.PUB), context.socket(zmq.ROUTER)
    while True:
        port = publisher.bind_to_random_port("tcp://127.0.0.1")
        try:
            router.bind(f"tcp://127.0.0.1:{port + 1}")
            break
        except zmq.ZMQError:
            publisher.unbind(f"tcp://127.0.0.1:{port}")
    chain = vllm_chain(TOKENS)
    published = [
        frames(0, stored(chain[:2], None, TOKENS[:32])),
        frames(1, stored(chain[2:3], chain[1], TOKENS[32:48])),
    ]
    for message in published:  # before anyone subscribes: gone from the live stream
        await publisher.send_multipart(message)

    async def serve_replays() -> None:
        while True:
            client, _, start = await router.recv_multipart()
            for topic, seq, payload in published:
                if int.from_bytes(seq, "big") >= int.from_bytes(start, "big"):
                    await router.send_multipart([client, b"", topic, seq, payload])
            await router.send_multipart([client, b"", b"", vllm_kv_follower.END_SEQ, b""])

    replica = Replica("http://127.0.0.1:1", kv_events_port=port)
    tasks = [
        asyncio.create_task(serve_replays()),
        asyncio.create_task(vllm_kv_follower.follow(replica, lambda *_: None)),
    ]
    try:
        published.append(frames(2, stored(chain[3:4], chain[2], TOKENS[48:64])))
        for _ in range(200):  # the same batch again until it is heard (PUB drops it before the subscription)
            await publisher.send_multipart(published[-1])
            if replica.index.synced:
                break
            await asyncio.sleep(0.05)
        assert replica.index.cached == set(hash_blocks(TOKENS, BLOCK))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        publisher.close(linger=0)
        router.close(linger=0)
