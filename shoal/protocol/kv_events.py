"""What an engine tells routers about its prefix cache, on ``GET /kv/events`` (server-sent events).

On connect the engine sends one ``snapshot`` with every block hash it holds (blocks in use and freed blocks
that still keep their hash), then ``stored`` and ``removed`` events as blocks gain or lose their hash. Every
event carries a sequence number that grows by one per event on that connection's stream, so a follower that
sees a gap knows it missed something and reconnects for a fresh snapshot. Hashes are the integers of
``shoal.protocol.block_hash``; ``block_size`` and ``hash_scheme`` let a router check it computes the same.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from shoal.protocol.block_hash import BLOCK_HASH_SCHEME

KVEventType = Literal["snapshot", "stored", "removed"]


class KVEvent(BaseModel):
    """One event of the stream; serialized as the ``data:`` line of an SSE message."""

    type: KVEventType
    seq: int = Field(ge=0)
    hashes: list[int]
    block_size: int | None = None  # set on snapshots
    hash_scheme: str = BLOCK_HASH_SCHEME
    engine_id: str | None = None  # set on snapshots: changes when the engine restarts
