"""vLLM's KV cache events, read and named as Shoal names blocks. Pure: bytes in, Shoal's ``KVEvent``s out.

vLLM (``vllm/distributed/kv_events.py``) publishes numbered batches on a ZMQ PUB socket, each a multipart message
``[topic, seq (8 bytes, big-endian), payload]``; the payload is a msgpack array ``[ts, events, dp_rank]`` and each
event a map tagged by ``type``: ``BlockStored`` {``block_hashes``, ``parent_block_hash``, ``token_ids``,
``block_size``, ``lora_name``, ``extra_keys``, ...}, ``BlockRemoved`` {``block_hashes``}, ``AllBlocksCleared``.
Its hashes (SHA-256 bytes, or 64-bit integers) are not Shoal's, but a stored event carries what Shoal's chain
needs: the blocks' tokens and their parent. ``VllmCacheView`` keeps, per replica, vLLM's hash -> Shoal's chain
hash (``shoal.protocol.block_hash``): a first block's parent is ``ROOT_HASH``, a later one's is the mapped parent.

The law, per batch: seq 0 is a fresh publisher (a started or restarted engine: its cache starts empty), so the
view starts over, in sync, with an empty snapshot; the next seq continues; any other seq means batches were missed
(a gap, a follower that joined late, a restart whose first batches went by): ``MissedBatches`` names the first one,
and the follower asks vLLM's replay socket for them (it keeps its last 10,000 batches). If the replay does not
bring them, the view gives up: the replica is routed on the gateway's history until its cache is known again (a
seq 0, or ``AllBlocksCleared``), the mapping still kept meanwhile so chains stay known.

The replica's block size is that of the blocks starting a chain (a stored event without a parent: always whole
blocks); the gateway hashes prompts for the replica with it and shows it as a mismatch when it is not its
``--block-size``. What Shoal's chain cannot name is left unmapped, and so is every block after it in that chain:
blocks of another size (vLLM's partial blocks of hybrid models), an event whose tokens do not fill its blocks, one
with extra keys beyond a LoRA adapter's name (a cache salt, images), one whose parent is unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from shoal.protocol.block_hash import ROOT_HASH, adapter_extra_key, hash_block
from shoal.protocol.kv_events import KVEvent, KVEventType

VllmHash = bytes | int
ENGINE_ID = "vllm"


@dataclass(frozen=True)
class Stored:
    hashes: list[VllmHash]
    parent: VllmHash | None
    token_ids: list[int]
    block_size: int
    lora_name: str | None = None
    foreign_keys: bool = False  # extra keys Shoal's hash does not take (cache salt, multimodal)


@dataclass(frozen=True)
class Removed:
    hashes: list[VllmHash]


@dataclass(frozen=True)
class Cleared:
    pass


VllmEvent = Stored | Removed | Cleared


def _hashes(value: Any) -> list[VllmHash]:
    if not isinstance(value, list) or not all(isinstance(h, bytes | int) for h in value):
        raise ValueError(f"block_hashes must be a list of bytes or integers, got {value!r:.80}")
    return value


def _foreign_keys(extra_keys: Any, lora_name: str | None) -> bool:
    """Whether any block's extra keys hold more than the adapter's name (vLLM lists the LoRA name first)."""
    own = [lora_name] if lora_name is not None else []
    return any(keys and list(keys) != own for keys in extra_keys or [])


def decode_event(raw: Any) -> VllmEvent | None:
    """One event of a batch; ``None`` for a kind this gateway does not know (a newer vLLM's)."""
    if not isinstance(raw, dict):
        raise ValueError(f"an event must be a map, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind == "BlockStored":
        token_ids, block_size, lora = raw.get("token_ids"), raw.get("block_size"), raw.get("lora_name")
        if not isinstance(token_ids, list) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError("BlockStored needs token_ids (a list) and block_size (a positive integer)")
        parent = raw.get("parent_block_hash")
        if parent is not None and not isinstance(parent, bytes | int):
            raise ValueError(f"parent_block_hash must be bytes, an integer or nil, got {parent!r:.80}")
        lora_name = lora if isinstance(lora, str) else None
        foreign = _foreign_keys(raw.get("extra_keys"), lora_name)
        return Stored(_hashes(raw.get("block_hashes")), parent, token_ids, block_size, lora_name, foreign)
    if kind == "BlockRemoved":
        return Removed(_hashes(raw.get("block_hashes")))
    if kind == "AllBlocksCleared":
        return Cleared()
    return None


def decode_batch(payload: bytes) -> list[VllmEvent]:
    """A batch's events, in order; a ``ValueError`` when the payload is not vLLM's layout."""
    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        raise ValueError(f"not a msgpack event batch: {exc}") from exc
    if not isinstance(batch, list) or len(batch) < 2 or not isinstance(batch[1], list):
        raise ValueError("an event batch is an array [ts, events, ...]")
    return [event for raw in batch[1] if (event := decode_event(raw)) is not None]


def decode_seq(frame: bytes) -> int:
    """The batch's sequence number: 8 bytes, big-endian."""
    if len(frame) != 8:
        raise ValueError(f"a sequence number is 8 bytes, got {len(frame)}")
    return int.from_bytes(frame, "big")


def shoal_chain(event: Stored, parent: int) -> list[int]:
    """Shoal's hashes of the stored blocks, chained from ``parent``; empty when they are not whole blocks."""
    size = event.block_size
    if event.foreign_keys or len(event.token_ids) != len(event.hashes) * size:
        return []
    extra = adapter_extra_key(event.lora_name)
    chain: list[int] = []
    for start in range(0, len(event.token_ids), size):
        parent = hash_block(parent, event.token_ids[start : start + size], extra)
        chain.append(parent)
    return chain


class MissedBatches(Exception):
    """Batches from ``start`` on never arrived: the follower replays them from vLLM's buffer, or gives up."""

    def __init__(self, start: int) -> None:
        super().__init__(f"kv event batches from seq {start} on were missed")
        self.start = start


class VllmCacheView:
    """One replica's vLLM cache as Shoal's KV events (see the module docstring)."""

    def __init__(self) -> None:
        self.shoal_of: dict[VllmHash, int] = {}
        self.synced = False
        self.lost = False  # given up: only a fresh publisher or a cleared cache brings it back
        self.block_size: int | None = None  # of the blocks that start chains
        self._next_seq: int | None = None
        self._replayed = range(0)  # replayed batches that may still arrive live, until a later one does
        self._out_seq = 0

    def _event(self, type_: KVEventType, hashes: Sequence[int]) -> KVEvent:
        self._out_seq += 1
        return KVEvent(type=type_, seq=self._out_seq, hashes=list(hashes))

    def snapshot(self) -> KVEvent:
        """Everything the view knows the replica holds, as a snapshot that (re)starts the index's stream."""
        self._out_seq = 0
        self.synced, self.lost = True, False
        hashes = sorted(set(self.shoal_of.values()))
        return KVEvent(type="snapshot", seq=0, hashes=hashes, block_size=self.block_size, engine_id=ENGINE_ID)

    def give_up(self) -> None:
        """What the replica holds is not known (batches missed for good): the history stands in."""
        self.synced, self.lost = False, True
        self._next_seq = None  # the next batch is taken as it comes

    def replayed(self, start: int) -> None:
        """The batches from ``start`` on were just replayed: the live stream may still bring them, once."""
        self._replayed = range(start, self._next_seq or start)

    def receive(self, seq: int, events: Sequence[VllmEvent]) -> list[KVEvent]:
        """Shoal's events for one batch: for the prefix index while in sync, nothing otherwise. Raises
        ``MissedBatches`` at a gap while the view is not lost (nothing of the batch is applied then)."""
        out: list[KVEvent] = []
        expected = self._next_seq
        if seq == 0:  # a fresh publisher: its cache starts empty
            self.shoal_of.clear()
            out.append(self.snapshot())
        elif expected is not None and seq < expected:
            if seq in self._replayed:
                return []  # a replayed batch, live too
            raise MissedBatches(0)  # the publisher started over and its first batches went by
        elif not self.lost and seq != expected:
            raise MissedBatches(expected or 0)
        self._next_seq = seq + 1
        self._replayed = range(0)
        for event in events:
            produced = self._apply(event)  # the mapping is kept in or out of sync
            if self.synced:
                out += produced
        return out

    def _apply(self, event: VllmEvent) -> list[KVEvent]:
        if isinstance(event, Cleared):
            self.shoal_of.clear()
            return [self.snapshot()]
        if isinstance(event, Removed):
            gone = [self.shoal_of.pop(h) for h in event.hashes if h in self.shoal_of]
            return [self._event("removed", gone)] if gone else []
        if event.parent is None:
            self.block_size = event.block_size
        parent = ROOT_HASH if event.parent is None else self.shoal_of.get(event.parent)
        if parent is None or event.block_size != self.block_size:
            return []
        chain = shoal_chain(event, parent)
        if not chain:
            return []
        self.shoal_of.update(zip(event.hashes, chain, strict=True))
        return [self._event("stored", chain)]
