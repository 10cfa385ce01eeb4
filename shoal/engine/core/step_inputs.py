"""A step's model inputs and attention metadata, filled on the host and moved to the device in one copy.

Design (vLLM v1's persistent ``InputBatch`` buffers, nano-vllm's ``prepare_decode``). Two byte arenas are
allocated once, sized for the largest step (``max_num_batched_tokens`` tokens, ``max_num_seqs`` sequences,
``max_model_len`` tokens of blocks each): one on the host (pinned when the device is a GPU, so the copy is
asynchronous) and one on the device. Each step writes its fields into the host arena through numpy views, packed
back to back::

    input_ids, positions, slot_mapping [T] int64 | logits_indices [L] int64 |
    query_start_loc [S + 1], seq_lens [S], block_tables [S, W] int32

then copies that one contiguous prefix to the device arena with a single ``copy_`` and hands the model views of
it. No per-step ``torch.tensor(list)``, no nested lists: per request the loop gathers five numbers and its new
token ids, and positions, sequence lengths, slot mapping and logits rows are computed with numpy over the whole
batch. The block tables come from ``BlockTable``'s persistent rows, one gather. A field's place depends only on
the step's shape (T tokens, S sequences, L sampled rows, W table width), so a decode batch of a given size finds
its inputs at the same device addresses every step, which is what replaying a captured CUDA graph needs.

The host arena is rewritten by the next step while the device may still be reading the last copy only if a step
returned before its device work finished; every step ends by bringing its sampled tokens to the host, which waits
for the device, so it never does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from shoal.engine.core.block_table import BlockTable
from shoal.engine.core.request import Request
from shoal.engine.core.scheduler import SchedulerOutput
from shoal.kernels import AttentionMetadata

_ALIGN = 8  # every field starts on an int64 boundary, so a byte offset is a valid typed view


@dataclass(frozen=True)
class StepBatch:
    """One step's device inputs, and the requests whose last row the model turns into logits (in row order)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    logits_indices: torch.Tensor
    meta: AttentionMetadata
    sampling: list[Request]
    query_lens: list[int]


class StepInputs:
    """The persistent host and device buffers of a step's inputs, and the block-table rows they are built from."""

    def __init__(
        self, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int, block_size: int, device: str
    ) -> None:
        self.block_size = block_size
        self.device = torch.device(device)
        self.block_table = BlockTable(max_num_seqs, -(-max_model_len // block_size))
        nbytes = _end(max_num_batched_tokens, max_num_seqs, max_num_seqs, self.block_table.rows.shape[1])
        self.host = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        self.device_buffer = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)
        self._host = self.host.numpy()
        self._arange = np.arange(max(max_num_batched_tokens, max_num_seqs) + 1, dtype=np.int64)

    def prepare(self, batch: SchedulerOutput) -> StepBatch:
        """Fills the host arena for ``batch``, copies it to the device once, and returns views of the copy."""
        table = self.block_table
        for request_id in batch.released:
            table.release(request_id)
        token_ids: list[int] = []
        starts: list[int] = []
        query_lens: list[int] = []
        rows: list[int] = []
        sampled_rows: list[int] = []
        sampling: list[Request] = []
        width = 1
        counts = batch.num_scheduled_tokens
        for i, request in enumerate(batch.scheduled):
            start = request.num_computed_tokens
            n = counts[request.request_id]
            end = start + n
            if n == 1:
                token_ids.append(request.all_token_ids[start])
            else:
                token_ids.extend(request.all_token_ids[start:end])
            starts.append(start)
            query_lens.append(n)
            rows.append(table.sync(request))
            width = max(width, len(request.block_ids))
            if end == request.num_tokens:
                sampled_rows.append(i)
                sampling.append(request)
        num_tokens, num_seqs, num_sampled = len(token_ids), len(starts), len(sampling)
        at = _offsets(num_tokens, num_seqs, num_sampled, width)
        host = self._host
        ids = _view(host, at[0], num_tokens, np.int64)
        positions = _view(host, at[1], num_tokens, np.int64)
        slots = _view(host, at[2], num_tokens, np.int64)
        logits_indices = _view(host, at[3], num_sampled, np.int64)
        query_start_loc = _view(host, at[4], num_seqs + 1, np.int32)
        seq_lens = _view(host, at[5], num_seqs, np.int32)
        tables = _view(host, at[6], num_seqs * width, np.int32).reshape(num_seqs, width)

        ids[:] = token_ids
        np.take(table.rows[:, :width], rows, axis=0, out=tables)
        query_start_loc[0] = 0
        np.cumsum(query_lens, out=query_start_loc[1:])
        seq_lens[:] = starts
        if num_tokens == num_seqs:  # decodes only: token i is sequence i's one new token
            positions[:] = starts
            owner = self._arange[:num_seqs]
        else:  # token t of sequence s sits at starts[s] + t - query_start_loc[s]
            owner = np.repeat(self._arange[:num_seqs], query_lens)
            positions[:] = self._arange[:num_tokens] + (seq_lens - query_start_loc[:-1])[owner]
        seq_lens += query_start_loc[1:] - query_start_loc[:-1]
        size = self.block_size
        slots[:] = tables[owner, positions // size]
        slots *= size
        slots += positions % size
        np.subtract(query_start_loc[1:][sampled_rows], 1, out=logits_indices)

        end = at[7]
        device = self.device_buffer[:end]
        device.copy_(self.host[:end], non_blocking=True)
        meta = AttentionMetadata(
            query_start_loc=_tensor(device, at[4], num_seqs + 1, torch.int32),
            seq_lens=_tensor(device, at[5], num_seqs, torch.int32),
            block_tables=_tensor(device, at[6], num_seqs * width, torch.int32).view(num_seqs, width),
            slot_mapping=_tensor(device, at[2], num_tokens, torch.int64),
            max_query_len=max(query_lens),
            max_seq_len=int(seq_lens.max()),
        )
        return StepBatch(
            input_ids=_tensor(device, at[0], num_tokens, torch.int64),
            positions=_tensor(device, at[1], num_tokens, torch.int64),
            logits_indices=_tensor(device, at[3], num_sampled, torch.int64),
            meta=meta,
            sampling=sampling,
            query_lens=query_lens,
        )


def _view(arena: np.ndarray, offset: int, count: int, dtype: type[np.generic]) -> np.ndarray:
    """``count`` elements of ``dtype`` at byte ``offset`` of a host arena."""
    size = np.dtype(dtype).itemsize
    return arena[offset : offset + count * size].view(dtype)


def _tensor(arena: torch.Tensor, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    """``count`` elements of ``dtype`` at byte ``offset`` of a device arena."""
    return arena[offset : offset + count * dtype.itemsize].view(dtype)


def _offsets(num_tokens: int, num_seqs: int, num_sampled: int, width: int) -> list[int]:
    """Byte offsets of the fields, in the arena's order, and the end of the last."""
    sizes = (
        8 * num_tokens,
        8 * num_tokens,
        8 * num_tokens,
        8 * num_sampled,
        4 * (num_seqs + 1),
        4 * num_seqs,
        4 * num_seqs * width,
    )
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + -(-size // _ALIGN) * _ALIGN)
    return offsets


def _end(num_tokens: int, num_seqs: int, num_sampled: int, width: int) -> int:
    return _offsets(num_tokens, num_seqs, num_sampled, width)[-1]
