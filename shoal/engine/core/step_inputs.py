"""A step's model inputs and attention metadata, filled on the host and moved to the device in one copy.

Design (vLLM v1's persistent ``InputBatch`` buffers, nano-vllm's ``prepare_decode``). Two int32 arenas (each
also seen as int64) are allocated once, sized for the largest step (``max_num_batched_tokens`` tokens,
``max_num_seqs`` sequences, ``max_model_len`` tokens of blocks each): one on the host (pinned when the device is
a GPU, so the copy is asynchronous) and one on the device. Each step writes its fields into the host arena
through numpy views, packed back to back::

    input_ids, positions, slot_mapping [T] int64 | logits_indices [L] int64 |
    query_start_loc [S + 1], seq_lens [S], block_tables [S, W] int32

then copies that one contiguous prefix to the device arena with a single ``copy_`` and hands the model views of
it. No per-step ``torch.tensor(list)``, no nested lists: one loop over the requests gathers each one's start,
length, row and new token ids (and a decode's slot); a decode batch's fields are then two numpy writes (every
int64 field from one list, every int32 one from another), and a batch with prefill chunks computes its positions
and slots with numpy over the whole batch. Few calls matter more than few operations: after a forward pass has
evicted the caches, each numpy or torch call costs several microseconds. The block tables come from
``BlockTable``'s persistent rows, one gather, as wide as the batch's longest (what ``AttentionMetadata.build``
makes). A field's place depends only on the step's counts (T tokens, S sequences, L sampled rows; the table,
last, only grows); a captured CUDA graph reads buffers of its own, as wide as ``max_model_len``, and a decode
step's ids, positions and slots, back to back here, reach them in one copy (``decode_graphs``). So a step of the
last step's counts and table width (a decode batch, for up to ``block_size`` steps) reuses the last step's views
instead of slicing the arenas again, and, while its rows are the same and ``BlockTable`` wrote none of them since,
leaves the gathered tables where they are: at batch 1 this took ``prepare`` from 61-69 to 30-43 us inside real
steps (docs/history/2026-12-06-step-host-batch1.md).

On a GPU the copy is asynchronous, and a step that samples nothing (a prefill chunk in the middle of a prompt)
returns without waiting for the device: before the next step rewrites the host arena it waits for an event
recorded after the last copy (only the copy, not the forward behind it).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
import torch

from shoal.engine.core.block_table import BlockTable
from shoal.engine.core.request import Request
from shoal.engine.core.scheduler import SchedulerOutput
from shoal.kernels import AttentionMetadata


@dataclass(frozen=True)
class StepBatch:
    """One step's device inputs, and the requests whose last row the model turns into logits (in row order)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    arena: torch.Tensor  # the device arena as int64, whose first 3T hold input ids, positions and slot mapping
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
        self.block_table = BlockTable(max_num_seqs, -(-max_model_len // block_size))
        size = _int32_end(max_num_batched_tokens, max_num_seqs, max_num_seqs, self.block_table.rows.shape[1])
        size += size % 2  # a whole number of int64s
        cuda = torch.device(device).type == "cuda"
        self.host = torch.zeros(size, dtype=torch.int32, pin_memory=cuda)
        self.device_buffer = torch.zeros(size, dtype=torch.int32, device=device)
        self._copied = torch.cuda.Event() if cuda else None  # the last copy has read the host arena
        self._device64 = self.device_buffer.view(torch.int64)
        self._host32 = self.host.numpy()
        self._host64 = self._host32.view(np.int64)
        self._arange = np.arange(max(max_num_batched_tokens, max_num_seqs) + 1, dtype=np.int64)
        self._arange32 = self._arange.astype(np.int32)
        self._views: _Views | None = None  # the last step's shape and its fields' views
        self._gathered: tuple[int, list[int]] | None = None  # the table's writes and the rows its tables hold

    def prepare(self, batch: SchedulerOutput) -> StepBatch:
        """Fills the host arena for ``batch``, copies it to the device once, and returns views of the copy."""
        if self._copied is not None:
            self._copied.synchronize()
        table = self.block_table
        for request_id in batch.released:
            table.release(request_id)
        token_ids: list[int] = []
        decode_slots: list[int] = []  # the slot of each one-token request's token (all of them in a decode batch)
        starts: list[int] = []
        query_lens: list[int] = []
        rows: list[int] = []
        sampled_rows: list[int] = []
        sampling: list[Request] = []
        width = 1
        size = self.block_size
        counts = batch.num_scheduled_tokens
        for i, request in enumerate(batch.scheduled):
            start = request.num_computed_tokens
            n = counts[request.request_id]
            end = start + n
            block_ids = request.block_ids
            if n == 1:
                token_ids.append(request.all_token_ids[start])
                decode_slots.append(block_ids[start // size] * size + start % size)
            else:
                token_ids.extend(request.all_token_ids[start:end])
            starts.append(start)
            query_lens.append(n)
            rows.append(table.sync(request))
            if len(block_ids) > width:
                width = len(block_ids)
            if end == len(request.all_token_ids):
                sampled_rows.append(i)
                sampling.append(request)
        t, s, sampled = len(token_ids), len(starts), len(sampling)
        views = self._views
        if views is None or views.shape != (t, s, sampled, width):
            views = self._views = self._views_of(t, s, sampled, width)
            self._gathered = None
        gathered = (table.writes, rows)
        if gathered != self._gathered:  # else the rows are in place: the same rows, unwritten, at the same shape
            np.take(views.table_rows, rows, axis=0, out=views.tables)
            self._gathered = gathered
        base = 2 * (3 * t + sampled)  # where the int32 fields begin, in int32s
        if t == s:  # decodes only: token i is sequence i's one new token, and logits row j is sequence j's
            self._host64[: 3 * t + sampled] = token_ids + starts + decode_slots + sampled_rows
            self._host32[base : base + 2 * s + 1] = [*range(s + 1), *[start + 1 for start in starts]]
        else:
            self._fill_mixed(t, s, sampled, token_ids, starts, query_lens, sampled_rows, views.tables)

        views.device.copy_(views.host, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        meta = AttentionMetadata(
            query_start_loc=views.query_start_loc,
            seq_lens=views.seq_lens,
            block_tables=views.block_tables,
            slot_mapping=views.slot_mapping,
            max_query_len=max(query_lens),
            max_seq_len=max(starts) + 1 if t == s else max(map(operator.add, starts, query_lens)),
        )
        device64 = self._device64
        positions = device64[t : 2 * t]  # made anew: a forward keeps its RoPE rows by this tensor's identity
        return StepBatch(views.input_ids, positions, device64, views.logits_indices, meta, sampling, query_lens)

    def _views_of(self, t: int, s: int, sampled: int, width: int) -> _Views:
        device32, device64 = self.device_buffer, self._device64  # slices, not split(): a third of the cost
        base = 2 * (3 * t + sampled)
        tables_at = base + 2 * s + 1
        end = _int32_end(t, s, sampled, width)
        return _Views(
            (t, s, sampled, width),
            tables=self._host32[tables_at:end].reshape(s, width),
            table_rows=self.block_table.rows[:, :width],
            host=self.host[:end],
            device=device32[:end],
            input_ids=device64[:t],
            logits_indices=device64[3 * t : 3 * t + sampled],
            query_start_loc=device32[base : base + s + 1],
            seq_lens=device32[base + s + 1 : tables_at],
            block_tables=device32[tables_at:end].view(s, width),
            slot_mapping=device64[2 * t : 3 * t],
        )

    def _fill_mixed(
        self,
        t: int,
        s: int,
        sampled: int,
        token_ids: list[int],
        starts: list[int],
        query_lens: list[int],
        sampled_rows: list[int],
        tables: np.ndarray,
    ) -> None:
        """The fields of a batch with prefill chunks, with numpy over the whole batch: token j of sequence i sits at
        ``starts[i] + j``, and its slot is read from the sequence's block-table row."""
        host64, host32, arange, size = self._host64, self._host32, self._arange, self.block_size
        base = 2 * (3 * t + sampled)
        query_start_loc = host32[base : base + s + 1]
        query_start_loc[0] = 0
        np.cumsum(query_lens, out=query_start_loc[1:])
        first = np.asarray(starts)
        np.add(first, query_lens, out=host32[base + s + 1 : base + 2 * s + 1], casting="unsafe")
        owner = np.repeat(arange[:s], query_lens)
        positions = host64[t : 2 * t]
        positions[:] = arange[:t] + (first - query_start_loc[:-1])[owner]
        host64[:t] = token_ids
        slots = host64[2 * t : 3 * t]
        slots[:] = tables[owner, positions // size]
        slots *= size
        slots += positions % size
        np.subtract(query_start_loc[1:][sampled_rows], 1, out=host64[3 * t : 3 * t + sampled])


def _int32_end(num_tokens: int, num_seqs: int, num_sampled: int, width: int) -> int:
    """The arena's length in int32s for a step of this shape: the int64 fields, then the int32 ones."""
    return 2 * (3 * num_tokens + num_sampled) + 2 * num_seqs + 1 + num_seqs * width


@dataclass(frozen=True)
class _Views:
    """The views of one step shape's fields, host and device: made once while the shape lasts (a numpy or torch
    slice costs microseconds right after a forward pass)."""

    shape: tuple[int, int, int, int]  # tokens, sequences, sampled rows, block-table width
    tables: np.ndarray  # the host arena's block tables [S, W]
    table_rows: np.ndarray  # the block table's rows, W wide: what ``tables`` gathers from
    host: torch.Tensor  # the host arena's used prefix
    device: torch.Tensor  # the device arena's, which it is copied into
    input_ids: torch.Tensor
    logits_indices: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    slot_mapping: torch.Tensor
