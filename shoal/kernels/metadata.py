"""The description of one batch that every attention implementation reads.

A batch packs the new tokens of several sequences into one flat dimension (``num_tokens``). Sequence ``s``
owns the query rows ``query_start_loc[s]:query_start_loc[s + 1]`` and, after this step's keys are written,
has ``seq_lens[s]`` tokens in its KV blocks. Its new tokens are the last ``query_len`` of those, so query row
``i`` of the sequence sits at position ``seq_lens[s] - query_len + i`` and attends causally to every position
up to and including its own. A decode is simply a sequence whose ``query_len`` is 1; prefill, chunked prefill
and a prefill after a prefix-cache hit are the same case with a longer chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionMetadata:
    """Where each sequence's queries and keys live; tensors are on the model's device."""

    query_start_loc: torch.Tensor  # int32 [num_seqs + 1], cumulative query lengths
    seq_lens: torch.Tensor  # int32 [num_seqs], context length including this step's tokens
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks_per_seq], padded with 0
    slot_mapping: torch.Tensor  # int64 [num_tokens], block_id * block_size + offset of each new token
    max_query_len: int
    max_seq_len: int

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def is_decode_only(self) -> bool:
        return self.max_query_len == 1

    @staticmethod
    def build(
        query_lens: list[int],
        seq_lens: list[int],
        block_tables: list[list[int]],
        block_size: int,
        device: torch.device | str = "cpu",
    ) -> AttentionMetadata:
        """Builds the tensors from per-sequence host lists (the scheduler's view of the batch)."""
        if not (len(query_lens) == len(seq_lens) == len(block_tables)):
            raise ValueError("query_lens, seq_lens and block_tables must have one entry per sequence")
        width = max((len(t) for t in block_tables), default=0) or 1
        slots: list[int] = []
        starts = [0]
        for s, (qlen, slen, blocks) in enumerate(zip(query_lens, seq_lens, block_tables, strict=True)):
            if qlen < 1 or slen < qlen:
                raise ValueError(f"sequence {s}: query_len={qlen} must be in [1, seq_len={slen}]")
            if len(blocks) * block_size < slen:
                raise ValueError(f"sequence {s}: {len(blocks)} blocks cannot hold {slen} tokens")
            for pos in range(slen - qlen, slen):
                slots.append(blocks[pos // block_size] * block_size + pos % block_size)
            starts.append(starts[-1] + qlen)
        rows = [[*blocks, *[0] * (width - len(blocks))] for blocks in block_tables]
        return AttentionMetadata(
            query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            block_tables=torch.tensor(rows, dtype=torch.int32, device=device).view(len(block_tables), width),
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            max_query_len=max(query_lens, default=0),
            max_seq_len=max(seq_lens, default=0),
        )
