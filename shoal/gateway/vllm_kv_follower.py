"""Follows one vLLM replica's ZMQ KV-event publisher into that replica's ``PrefixIndex``.

A SUB socket on ``tcp://<replica host>:<kv_events_port>``, subscribed to ``KV_EVENTS_TOPIC``; ZMQ reconnects by
itself when the engine restarts (its publisher then starts again at seq 0). Each batch goes through the replica's
``VllmCacheView`` (``shoal.gateway.vllm_kv_events``: the decoding and the hash mapping) and what comes out is
applied to the index exactly as Shoal's own ``/kv/events`` are. Batches that went by (the follower subscribed
after vLLM had published, or a gap) are asked of vLLM's replay socket, a ROUTER on the next port
(``kv_events_port + 1``): a DEALER sends the first seq wanted and reads ``[topic, seq, payload]`` frames until the
end marker (seq -1). If the replay cannot bring them, or a batch does not decode, the replica is routed on the
history until vLLM's cache is known again. The gateway ejecting the replica (a failed health check) desyncs the
index but not the view: the publisher's sequence numbers say whether anything was missed meanwhile, so the next
batch restores the index from the view. The block size of the blocks vLLM stores is the replica's
(``Replica.block_size``), so a vLLM started with another block size than the gateway's ``--block-size`` is logged
and shown as a mismatch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

from shoal.engine_kinds.vllm import KV_EVENTS_TOPIC
from shoal.gateway.prefix_index import EventGap
from shoal.gateway.replicas import Replica
from shoal.gateway.vllm_kv_events import MissedBatches, VllmCacheView, decode_batch, decode_seq

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 5.0  # per answer frame: a vLLM started without a replay socket never answers
END_SEQ = (-1).to_bytes(8, "big", signed=True)
OnSync = Callable[[Replica, bool], None]


def endpoint(replica: Replica, offset: int = 0) -> str:
    """The publisher's address (``offset`` 1: its replay socket's): the replica's host, its KV-event port."""
    assert replica.kv_events_port is not None
    host = urlsplit(replica.url).hostname or "127.0.0.1"
    return f"tcp://{f'[{host}]' if ':' in host else host}:{replica.kv_events_port + offset}"


def _socket(context: zmq.asyncio.Context, kind: int, address: str) -> zmq.asyncio.Socket:
    socket = context.socket(kind)
    if address.startswith("tcp://["):
        socket.setsockopt(zmq.IPV6, 1)
    socket.connect(address)
    return socket


def _give_up(replica: Replica, view: VllmCacheView, on_sync: OnSync, why: object) -> None:
    log.info("kv events from %s: %s; routing on the history until its cache is known again", replica.url, why)
    view.give_up()
    replica.index.desync()
    on_sync(replica, False)


def apply(replica: Replica, view: VllmCacheView, frames: list[bytes], on_sync: OnSync) -> None:
    """One multipart message ``[topic, seq, payload]`` into the replica's index; raises ``MissedBatches``
    (nothing of the batch applied) when batches before it never arrived."""
    if view.synced and not replica.index.synced:  # the gateway desynced it meanwhile (an ejected replica)
        replica.index.apply(view.snapshot())
        on_sync(replica, True)
    try:
        if len(frames) != 3:
            raise ValueError(f"expected [topic, seq, payload], got {len(frames)} frames")
        for event in view.receive(decode_seq(frames[1]), decode_batch(frames[2])):
            replica.index.apply(event)
            if event.type == "snapshot":
                on_sync(replica, True)
    except (ValueError, EventGap) as exc:
        _give_up(replica, view, on_sync, exc)
    if view.block_size is not None and view.block_size != replica.block_size:
        replica.block_size = view.block_size
        on_sync(replica, view.synced)


async def replay(context: zmq.asyncio.Context, replica: Replica, start: int) -> list[list[bytes]]:
    """The batches from ``start`` on that vLLM's replay socket still holds, as ``[topic, seq, payload]``."""
    dealer = _socket(context, zmq.DEALER, endpoint(replica, 1))
    try:
        await dealer.send_multipart([b"", start.to_bytes(8, "big")])
        batches: list[list[bytes]] = []
        while True:
            frames = await asyncio.wait_for(dealer.recv_multipart(), REPLAY_TIMEOUT_S)
            if len(frames) != 4:
                raise ValueError(f"a replayed batch is [empty, topic, seq, payload], got {len(frames)} frames")
            if frames[2] == END_SEQ:
                return batches
            batches.append(frames[1:])
    finally:
        dealer.close(linger=0)


async def _catch_up(
    context: zmq.asyncio.Context, replica: Replica, view: VllmCacheView, missed: int, live: list[bytes], on_sync: OnSync
) -> None:
    """Replays what was missed, then applies the live batch that showed it; gives up if the replay falls short."""
    try:
        for frames in await replay(context, replica, missed):
            apply(replica, view, frames, on_sync)
        view.replayed(missed)
        apply(replica, view, live, on_sync)
    except (MissedBatches, TimeoutError, ValueError, zmq.ZMQError) as exc:
        _give_up(replica, view, on_sync, f"{exc} and vLLM's replay socket did not bring them back")
        apply(replica, view, live, on_sync)  # given up: applied to the mapping only


async def follow(replica: Replica, on_sync: OnSync) -> None:
    """Runs until cancelled, keeping ``replica.index`` in step with vLLM's publisher."""
    context = zmq.asyncio.Context.instance()
    subscriber = _socket(context, zmq.SUB, endpoint(replica))
    try:
        subscriber.setsockopt(zmq.SUBSCRIBE, KV_EVENTS_TOPIC.encode())
        log.info("following %s's kv events at %s", replica.url, endpoint(replica))
        view = VllmCacheView()
        while True:
            frames = await subscriber.recv_multipart()
            try:
                apply(replica, view, frames, on_sync)
            except MissedBatches as missed:
                await _catch_up(context, replica, view, missed.start, frames, on_sync)
    finally:
        subscriber.close(linger=0)
