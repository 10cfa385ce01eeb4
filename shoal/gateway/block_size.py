"""Which block size the gateway hashes a prompt with: the one the model's engines announce.

Prefix-aware routing only works if the gateway names a prompt's blocks exactly as the engine does, and a block
hash covers ``block_size`` tokens. Each engine announces its block size (``/v1/models`` and its ``/kv/events``
snapshot); the gateway hashes a request with the size the model's ready replicas announce. ``--block-size``
(``spec.engine.blockSize``, passed by the operator) is what the gateway expects: a replica announcing another
is a mismatch, logged and shown in ``shoal_gateway_backend_block_size_mismatch``, never silent. If a model's
replicas disagree (a rolling change of ``blockSize``), requests are hashed with the expected size and the
replicas of the other size are routed by load alone until they agree again.
"""

from __future__ import annotations

from collections.abc import Iterable


def hashing_block_size(announced: Iterable[int | None], expected: int) -> int:
    """The block size to hash with, given what the candidate replicas announce (``None``: not known)."""
    sizes = {size for size in announced if size}
    return sizes.pop() if len(sizes) == 1 else expected


def mismatch(announced: int | None, expected: int) -> bool:
    """A replica announcing a block size other than the expected one."""
    return announced is not None and announced != expected
