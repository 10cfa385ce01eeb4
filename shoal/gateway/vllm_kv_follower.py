"""Follows one vLLM replica's ZMQ KV-event publisher into that replica's ``PrefixIndex``.

A SUB socket on ``tcp://<replica host>:<kv_events_port>``, subscribed to ``KV_EVENTS_TOPIC``; ZMQ reconnects by
itself when the engine restarts (its publisher then starts again at seq 0). Each batch goes through the replica's
``VllmCacheView`` (``shoal.gateway.vllm_kv_events``: the decoding and the hash mapping) and what comes out is
applied to the index exactly as Shoal's own ``/kv/events`` are. A gap or a batch that does not decode takes it out
of sync: routing falls back to the history until vLLM's cache is known again. The gateway ejecting the replica
(a failed health check) desyncs the index but not the view: the publisher's sequence numbers say whether anything
was missed meanwhile, so the next batch in sequence restores the index from the view. The block size of the blocks vLLM stores is the replica's (``Replica.block_size``), so a vLLM started with
another block size than the gateway's ``--block-size`` is logged and shown as a mismatch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

from shoal.engine_kinds.vllm import KV_EVENTS_TOPIC
from shoal.gateway.prefix_index import EventGap
from shoal.gateway.replicas import Replica
from shoal.gateway.vllm_kv_events import VllmCacheView, decode_batch, decode_seq

log = logging.getLogger(__name__)


def endpoint(replica: Replica) -> str:
    """The publisher's address: the replica's host, its KV-event port."""
    host = urlsplit(replica.url).hostname or "127.0.0.1"
    return f"tcp://{f'[{host}]' if ':' in host else host}:{replica.kv_events_port}"


def apply(replica: Replica, view: VllmCacheView, frames: list[bytes], on_sync: Callable[[Replica, bool], None]) -> None:
    """One multipart message ``[topic, seq, payload]`` into the replica's index."""
    if view.synced and not replica.index.synced:  # the gateway desynced it meanwhile (an ejected replica)
        replica.index.apply(view.snapshot())
        on_sync(replica, True)
    was_synced = view.synced
    try:
        if len(frames) != 3:
            raise ValueError(f"expected [topic, seq, payload], got {len(frames)} frames")
        for event in view.receive(decode_seq(frames[1]), decode_batch(frames[2])):
            replica.index.apply(event)
            if event.type == "snapshot":
                on_sync(replica, True)
    except (ValueError, EventGap) as exc:
        log.info("kv events from %s: %s", replica.url, exc)
        view.lose_sync()
    if view.block_size is not None and view.block_size != replica.block_size:
        replica.block_size = view.block_size
        on_sync(replica, view.synced)
    if was_synced and not view.synced:
        log.info("kv events from %s out of sequence; routing on the history until its cache is known", replica.url)
        replica.index.desync()
        on_sync(replica, False)


async def follow(replica: Replica, on_sync: Callable[[Replica, bool], None]) -> None:
    """Runs until cancelled, keeping ``replica.index`` in step with vLLM's publisher."""
    context = zmq.asyncio.Context.instance()
    socket = context.socket(zmq.SUB)
    address = endpoint(replica)
    try:
        if address.startswith("tcp://["):
            socket.setsockopt(zmq.IPV6, 1)
        socket.setsockopt(zmq.SUBSCRIBE, KV_EVENTS_TOPIC.encode())
        socket.connect(address)
        log.info("following %s's kv events at %s", replica.url, address)
        view = VllmCacheView()
        while True:
            apply(replica, view, await socket.recv_multipart(), on_sync)
    finally:
        socket.close(linger=0)
