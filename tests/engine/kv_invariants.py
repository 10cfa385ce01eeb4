"""Checks shared by the engine tests: the block manager's books balance."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.request import Request


def assert_consistent(bm: BlockManager, live: Iterable[Request]) -> None:
    """Ref counts equal table occurrences, the free queue is exactly the unused blocks, hashes agree; a sliding
    window's dead entries point at the null block, and only they do."""
    live = list(live)
    uses = Counter(b for r in live for b in r.block_ids[r.num_dropped_blocks :])
    for request in live:
        assert all(b == bm.null_block for b in request.block_ids[: request.num_dropped_blocks]), request
        assert bm.null_block not in request.block_ids[request.num_dropped_blocks :], request
    for block in bm.blocks:
        assert block.ref_count == uses[block.block_id] >= 0, block
        assert (block.ref_count == 0) == (block.block_id in bm.free_queue), block
    named = {b.block_hash: b.block_id for b in bm.blocks if b.block_hash is not None}
    assert named == bm.cached
    assert len(named) == sum(1 for b in bm.blocks if b.block_hash is not None), "two blocks share a hash"
    for request in live:
        for i, block_id in enumerate(request.block_ids):
            if i < request.num_dropped_blocks:
                continue
            block_hash = bm.blocks[block_id].block_hash
            if block_hash is not None:  # a shared block holds exactly this request's tokens
                assert block_hash == request.block_hashes[i], (request, i)


def assert_all_free(bm: BlockManager) -> None:
    """After a workload: every block back in the free pool, no reference left, none negative."""
    assert bm.num_free_blocks == bm.num_blocks
    assert all(b.ref_count == 0 for b in bm.blocks)
