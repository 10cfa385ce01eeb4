"""The prefix-cache block hash: a public contract between the engine and the gateway.

The engine names each *full* KV block of a sequence by a hash chained over everything before it:
``hash(block i) = H(hash(block i - 1), token ids of block i, extra key)``, starting from ``ROOT_HASH``. Two
sequences share block ``i`` exactly when they share every token up to its end (and the extra key, which
separates caches that must not mix, such as a cache salt or an adapter). The gateway tokenizes a prompt,
computes the same chain and asks which replica already holds its longest run of blocks; the engine
publishes what it holds on ``/kv/events`` as these same integers.

``H`` is BLAKE2b with an 8-byte digest over the parent hash (8 bytes, little-endian), the token ids (uint32
little-endian each) and the extra key, read as an unsigned 64-bit integer. It is stable across processes,
machines and Python versions, unlike ``hash()``. Changing any of this changes ``BLOCK_HASH_SCHEME``.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence

BLOCK_HASH_SCHEME = "blake2b64-chain-v1"
DEFAULT_BLOCK_SIZE = 16
ROOT_HASH = 0


def hash_block(parent: int, token_ids: Sequence[int], extra_key: bytes = b"") -> int:
    """Hash of one full block given its parent's hash (``ROOT_HASH`` for the first block)."""
    tokens = array("I", token_ids)
    if sys.byteorder == "big":
        tokens.byteswap()
    h = hashlib.blake2b(digest_size=8)
    h.update(parent.to_bytes(8, "little"))
    h.update(tokens.tobytes())
    h.update(extra_key)
    return int.from_bytes(h.digest(), "little")


def adapter_extra_key(adapter: str | None) -> bytes:
    """The extra key of a request served through the LoRA adapter named ``adapter`` (none for the base model): the
    engine hashes its blocks with it, and so does the gateway for a request whose ``model`` is that adapter."""
    return b"" if adapter is None else b"lora:" + adapter.encode()


def hash_blocks(
    token_ids: Sequence[int],
    block_size: int = DEFAULT_BLOCK_SIZE,
    extra_key: bytes = b"",
    parent: int = ROOT_HASH,
) -> list[int]:
    """Chained hashes of every full block of ``token_ids``; a partial last block gets none."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    hashes: list[int] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start : start + block_size], extra_key)
        hashes.append(parent)
    return hashes
