"""The paged KV cache's bookkeeping: which block holds what, who uses it, and what can be reused.

Design. The cache is ``num_blocks`` fixed-size blocks of ``block_size`` token slots. A request owns a block
table (``Request.block_ids``); block ``i`` holds its tokens ``[i * block_size, (i + 1) * block_size)``. Every
block has a reference count: a block shared by several requests through the prefix cache is counted once per
user. Once a block is full its content is named by the chained hash of ``shoal.protocol.block_hash`` (parent
hash + token ids), which is a public contract: the gateway computes the same numbers to route by prefix.

Eviction is lazy (vLLM v1, nano-vllm). A block whose count drops to zero goes to the tail of an LRU free
queue *keeping its hash*; it loses the hash only when the queue's head is handed out again. A new request
first looks up its full prompt blocks by hash: a hit on a block in use just bumps its count, a hit on a
free block takes it back out of the queue. The lookup stops one token short of the prompt, so the last
prompt token is always recomputed (its logits are needed). A request frees its blocks tail first, so the
end of a prefix chain is evicted before its shared beginning.

With a sliding window (every layer attends only to its last ``sliding_window`` positions), a running request's
blocks that lie wholly before its next query's window are dead: they are released as the request moves on (to
the free queue with their hashes, so they still serve prefix hits) and their table entries point at a null
block that is never handed out, so a long request holds about a window's worth of blocks. The null block is one
extra block past ``num_blocks`` (``num_cache_blocks``): the kernels may read it, masked, and nothing writes it.

Every hash that enters or leaves the cache is recorded as a ``stored`` / ``removed`` event for the KV event
stream; ``cached_hashes()`` is the snapshot a new subscriber starts from. Allocation is all or nothing: when
the free queue is too short, ``allocate_slots`` changes nothing and returns False (the scheduler preempts).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from shoal.engine.core.request import Request
from shoal.protocol.block_hash import ROOT_HASH, hash_block
from shoal.protocol.kv_events import KVEventType


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None


class BlockManager:
    """Allocates, shares, frees and caches KV blocks; pure bookkeeping, no tensors."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        sliding_window: int | None = None,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}")
        if sliding_window is not None and sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.sliding_window = sliding_window
        self.null_block = num_blocks  # what a dead block's table entry points at (sliding window only)
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        self.events: list[tuple[KVEventType, list[int]]] = []  # ("stored" | "removed", hashes), drained by the engine
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_cache_blocks(self) -> int:
        """Blocks the KV cache tensors must hold: ``num_blocks``, plus the null block with a sliding window."""
        return self.num_blocks + (self.sliding_window is not None)

    @property
    def usage(self) -> float:
        return 1.0 - len(self.free_queue) / self.num_blocks

    def cached_hashes(self) -> list[int]:
        """Every hash the cache can serve right now (blocks in use and free blocks not yet reused)."""
        return list(self.cached)

    def drain_events(self) -> list[tuple[KVEventType, list[int]]]:
        events, self.events = self.events, []
        return events

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """The longest cached prefix of a request not yet scheduled: (block ids, number of tokens).

        Nothing is taken yet; pass the blocks to ``allocate_slots``, then ``record_prefix_query``. With a sliding
        window the whole prefix must still be cached (conservative: only its last window is read).
        """
        if not self.enable_prefix_caching:
            return [], 0
        self._update_hashes(request)
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[int] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block_id = self.cached.get(block_hash)
            if block_id is None:
                break
            hits.append(block_id)
        return hits, len(hits) * self.block_size

    def record_prefix_query(self, num_queried_tokens: int, num_hit_tokens: int) -> None:
        """Counts one admitted lookup (a lookup retried because the cache was full counts once)."""
        if self.enable_prefix_caching:
            self.prefix_queried_tokens += num_queried_tokens
            self.prefix_hit_tokens += num_hit_tokens

    def allocate_slots(self, request: Request, num_new_tokens: int, computed_blocks: list[int] | None = None) -> bool:
        """Gives ``request`` room for ``num_new_tokens`` more tokens past its computed ones.

        ``computed_blocks`` (from ``get_computed_blocks``, first scheduling only) are shared and the request's
        computed count jumps past them. Returns False, changing nothing else, if the free queue is too short;
        blocks a sliding window has left behind are released first either way.
        """
        if self.sliding_window is not None:
            self._release_outside_window(request)
        total = request.num_computed_tokens + num_new_tokens
        if not computed_blocks and total <= len(request.block_ids) * self.block_size:
            # most decode steps: the new token fits the last block; only a block it fills gets a name
            if self.enable_prefix_caching and total // self.block_size > request.num_named_blocks:
                self._cache_full_blocks(request, total)
            return True
        computed_blocks = computed_blocks or []
        reused_free = sum(1 for b in computed_blocks if self.blocks[b].ref_count == 0)
        num_computed = request.num_computed_tokens + len(computed_blocks) * self.block_size
        total_blocks = len(request.block_ids) + len(computed_blocks)
        needed = self.blocks_needed(num_computed + num_new_tokens) - total_blocks
        if reused_free + max(needed, 0) > len(self.free_queue):
            return False
        for block_id in computed_blocks:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_queue[block_id]
            block.ref_count += 1
            request.block_ids.append(block_id)
        if computed_blocks:
            request.num_computed_tokens = num_computed
            request.num_cached_tokens = num_computed
        for _ in range(needed):
            request.block_ids.append(self._take_free_block())
        if self.enable_prefix_caching:
            self._cache_full_blocks(request, num_computed + num_new_tokens)
        return True

    def free(self, request: Request) -> None:
        """Releases a request's blocks, tail first so shared prefixes outlive their tails in the LRU queue."""
        for block_id in reversed(request.block_ids[request.num_dropped_blocks :]):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count < 0:
                raise AssertionError(f"block {block_id} freed more often than allocated")
            if block.ref_count == 0:
                self.free_queue[block_id] = None
        request.block_ids = []
        request.num_named_blocks = 0
        request.num_dropped_blocks = 0

    def _release_outside_window(self, request: Request) -> None:
        """Releases the leading blocks no query of ``request`` will read again: the next query sits at position
        ``num_computed_tokens`` and sees from ``num_computed_tokens - sliding_window + 1`` on."""
        assert self.sliding_window is not None
        first_visible = request.num_computed_tokens - self.sliding_window + 1
        dead = min(max(first_visible, 0) // self.block_size, len(request.block_ids))
        for i in range(request.num_dropped_blocks, dead):
            block = self.blocks[request.block_ids[i]]
            block.ref_count -= 1
            if block.ref_count < 0:
                raise AssertionError(f"block {block.block_id} freed more often than allocated")
            if block.ref_count == 0:
                self.free_queue[block.block_id] = None
            request.block_ids[i] = self.null_block
        request.num_dropped_blocks = max(request.num_dropped_blocks, dead)

    def _take_free_block(self) -> int:
        block_id, _ = self.free_queue.popitem(last=False)
        block = self.blocks[block_id]
        if block.block_hash is not None:
            if self.cached.get(block.block_hash) == block_id:
                del self.cached[block.block_hash]
                self.events.append(("removed", [block.block_hash]))
            block.block_hash = None
        block.ref_count = 1
        return block_id

    def _update_hashes(self, request: Request) -> None:
        """Extends the request's chain of block hashes over its newly full blocks of known tokens."""
        hashes, tokens, size = request.block_hashes, request.all_token_ids, self.block_size
        for i in range(len(hashes), len(tokens) // size):
            parent = hashes[-1] if hashes else ROOT_HASH
            hashes.append(hash_block(parent, tokens[i * size : (i + 1) * size], request.block_hash_key))

    def _cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Names the blocks that ``num_tokens`` fill; a duplicate of a cached block stays unnamed."""
        self._update_hashes(request)
        stored: list[int] = []
        full = num_tokens // self.block_size
        for i in range(request.num_named_blocks, full):
            block = self.blocks[request.block_ids[i]]
            if block.block_hash is not None:
                continue
            block_hash = request.block_hashes[i]
            if block_hash in self.cached:
                continue
            block.block_hash = block_hash
            self.cached[block_hash] = block.block_id
            stored.append(block_hash)
        request.num_named_blocks = max(request.num_named_blocks, full)
        if stored:
            self.events.append(("stored", stored))
