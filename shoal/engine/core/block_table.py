"""The block tables the attention kernels read, kept between steps: one row per running request.

A running request's block ids only ever grow at the end (``BlockManager.allocate_slots``), or have leading
entries turned into the null block as a sliding window leaves them behind; they are dropped whole when the
request finishes or is preempted (the scheduler hands those ids to the next batch as ``released``). So each
request keeps one row of a preallocated int32 array for as long as it runs, and a step writes only what changed
since the last one: nothing for a decode that stays in its last block, one entry when it crosses into a new block.
Building the batch's table is then one gather of its rows (vLLM v1's ``BlockTable``, without its own device copy:
the step's single copy carries it, ``step_inputs``).
"""

from __future__ import annotations

import numpy as np

from shoal.engine.core.request import Request


class BlockTable:
    """Rows of block ids for up to ``max_rows`` requests, ``max_blocks`` entries each, padded with 0."""

    def __init__(self, max_rows: int, max_blocks: int) -> None:
        self.rows = np.zeros((max_rows, max_blocks), dtype=np.int32)
        self._row_of: dict[str, int] = {}
        self._free = list(range(max_rows - 1, -1, -1))  # popped from the end: row 0 first
        self._synced = [0] * max_rows  # entries written per row
        self._dropped = [0] * max_rows  # the request's num_dropped_blocks at the last write
        self.writes = 0  # changes to ``rows`` so far: a reader that saw this count has seen every row as it is

    def __len__(self) -> int:
        return len(self._row_of)

    def release(self, request_id: str) -> None:
        """Frees the row of a request whose blocks were freed (unknown ids are fine: it never ran)."""
        row = self._row_of.pop(request_id, None)
        if row is None:
            return
        self.rows[row, : self._synced[row]] = 0
        self.writes += 1
        self._synced[row] = self._dropped[row] = 0
        self._free.append(row)

    def sync(self, request: Request) -> int:
        """The request's row (taken on its first step), with the entries changed since its last step written."""
        row = self._row_of.get(request.request_id)
        if row is None:
            row = self._row_of[request.request_id] = self._free.pop()
        block_ids = request.block_ids
        start = self._synced[row]
        dropped = request.num_dropped_blocks
        if dropped > self._dropped[row]:  # entries a sliding window turned into the null block
            start = min(start, self._dropped[row])
            self._dropped[row] = dropped
        end = len(block_ids)
        if end > start:
            self.rows[row, start:end] = block_ids[start:end]
            self.writes += 1
        self._synced[row] = end
        return row
