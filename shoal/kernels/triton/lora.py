"""LoRA's two batched products, each token through its own adapter slot: shrink ``x @ A`` and expand ``+= t @ B``.

The layouts are the model's (``shoal.engine.model.lora_linear``): ``a`` ``[in, slots, C]`` holds every resident
slot's ``A`` transposed, ``C = parts * max_rank`` columns each (one section of ``max_rank`` per part of a fused
projection, zeros past an adapter's rank); ``b`` ``[slots, C, out]`` holds ``scale * B`` transposed, section ``p``'s
rows nonzero only in part ``p``'s output columns. So:

- shrink: ``t[i] = x[i] @ a[:, slot(i)]``, every part at once, into an fp32 ``[T, C]`` (zeros for tokens without
  a slot);
- expand: for each part ``p`` (a slice of the output: q, k, v or gate, up), ``y[i, part p] += t[i, section p] @
  b[slot(i), section p, part p]``, in place; tokens without a slot are never touched.

Both work as punica's SGMV (and vLLM's ``lora_shrink`` / ``lora_expand``) do: the tokens arrive grouped by slot
(``LoRAMetadata``), and the grid is ``(token tiles, column tiles, slots)`` (expand: ``slots * parts``), sized by
the longest slot's run; a program whose tile lies past its slot's run returns at once, so a decode step with eight
adapters costs eight tiles of ``BLOCK_M`` tokens, each multiplying its slot's matrices on tensor cores with an fp32
accumulator. A decode step has few tokens and a long ``in``: the shrink splits ``in`` into ``split_k`` chunks
whose programs add their partial products atomically, to put more of the GPU to work. fp32 operands multiply in
full fp32; under the interpreter bf16 ones go through fp32 (``launch.upcast_dots``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.lora_metadata import MAX_LORA_PARTS, LoRAMetadata
from shoal.kernels.triton.launch import fp32_dots, pow2, upcast_dots

BLOCK_M = 16  # tokens per tile: tl.dot needs 16 at least, and a decode step gives a slot few tokens
BLOCK_K = 64
SHRINK_MAX_BLOCK_N = 64
EXPAND_BLOCK_N = 64
MAX_SPLIT_K = 16


@triton.jit
def _lora_shrink_kernel(
    x_ptr,
    a_ptr,
    t_ptr,
    sorted_ptr,
    starts_ptr,
    counts_ptr,
    K,
    C,
    K_PER_SPLIT,
    stride_x,
    stride_ak,
    stride_as,
    stride_t,
    SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
    FP32_DOTS: tl.constexpr,
):
    slot = tl.program_id(2)
    tile = tl.program_id(0) // SPLIT_K
    split = tl.program_id(0) % SPLIT_K
    count = tl.load(counts_ptr + slot)
    first = tile * BLOCK_M
    if first >= count:
        return
    idx = first + tl.arange(0, BLOCK_M)
    row_mask = idx < count
    tokens = tl.load(sorted_ptr + tl.load(starts_ptr + slot) + idx, mask=row_mask, other=0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < C
    x_rows = x_ptr + tokens[:, None] * stride_x
    a_cols = a_ptr + slot.to(tl.int64) * stride_as + cols[None, :]
    k_end = tl.minimum(K, (split + 1) * K_PER_SPLIT)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(split * K_PER_SPLIT, k_end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < k_end
        xs = tl.load(x_rows + ks[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        ws = tl.load(
            a_cols + ks.to(tl.int64)[:, None] * stride_ak, mask=k_mask[:, None] & col_mask[None, :], other=0.0
        )  # [BLOCK_K, BLOCK_N]
        if UPCAST:
            xs = xs.to(tl.float32)
            ws = ws.to(tl.float32)
        if FP32_DOTS:
            acc = tl.dot(xs, ws, acc, input_precision="ieee")
        else:
            acc = tl.dot(xs, ws, acc)
    out = t_ptr + tokens[:, None] * stride_t + cols[None, :]
    mask = row_mask[:, None] & col_mask[None, :]
    if SPLIT_K == 1:
        tl.store(out, acc, mask=mask)
    else:
        tl.atomic_add(out, acc, mask=mask)


@triton.jit
def _lora_expand_kernel(
    t_ptr,
    b_ptr,
    y_ptr,
    sorted_ptr,
    starts_ptr,
    counts_ptr,
    N0,
    N1,
    N2,
    R,
    stride_t,
    stride_bs,
    stride_bc,
    stride_y,
    NUM_PARTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FP32_DOTS: tl.constexpr,
):
    slot = tl.program_id(2) // NUM_PARTS
    part = tl.program_id(2) % NUM_PARTS
    count = tl.load(counts_ptr + slot)
    first = tl.program_id(0) * BLOCK_M
    col_start = tl.where(part == 0, 0, tl.where(part == 1, N0, N0 + N1))
    col_end = col_start + tl.where(part == 0, N0, tl.where(part == 1, N1, N2))
    col_first = col_start + tl.program_id(1) * BLOCK_N
    if (first >= count) | (col_first >= col_end):
        return
    idx = first + tl.arange(0, BLOCK_M)
    row_mask = idx < count
    tokens = tl.load(sorted_ptr + tl.load(starts_ptr + slot) + idx, mask=row_mask, other=0).to(tl.int64)
    cols = col_first + tl.arange(0, BLOCK_N)
    col_mask = cols < col_end
    t_rows = t_ptr + tokens[:, None] * stride_t + part * R
    b_cols = b_ptr + slot.to(tl.int64) * stride_bs + (part * R).to(tl.int64) * stride_bc + cols[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, R, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < R
        ts = tl.load(t_rows + ks[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        ws = tl.load(b_cols + ks.to(tl.int64)[:, None] * stride_bc, mask=k_mask[:, None] & col_mask[None, :], other=0.0)
        if FP32_DOTS:
            acc = tl.dot(ts, ws.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(ts.to(ws.dtype), ws, acc)
    out = y_ptr + tokens[:, None] * stride_y + cols[None, :]
    mask = row_mask[:, None] & col_mask[None, :]
    old = tl.load(out, mask=mask, other=0.0)
    tl.store(out, (old.to(tl.float32) + acc).to(y_ptr.dtype.element_ty), mask=mask)


def _shrink_block_n(columns: int) -> int:
    return min(SHRINK_MAX_BLOCK_N, pow2(columns, 16))


def shrink_column_tiles(columns: int) -> int:
    """How many column tiles the shrink cuts ``C`` into."""
    return triton.cdiv(columns, _shrink_block_n(columns))


def choose_split_k(meta: LoRAMetadata, in_features: int, column_tiles: int, num_sms: int) -> int:
    """Chunks of ``in`` for the shrink: enough programs to give every streaming multiprocessor one, each chunk
    still ``BLOCK_K`` wide at least; 1 where there is no GPU to fill (the interpreter: ``num_sms`` 0)."""
    programs = triton.cdiv(meta.max_slot_tokens, BLOCK_M) * column_tiles * meta.num_slots
    if num_sms <= 0 or programs >= num_sms:
        return 1
    return max(1, min(MAX_SPLIT_K, num_sms // max(programs, 1), in_features // BLOCK_K))


def lora_shrink(x: torch.Tensor, a: torch.Tensor, meta: LoRAMetadata, split_k: int = 1) -> torch.Tensor:
    """``x`` ``[T, in]`` times its tokens' slots of ``a`` ``[in, slots, C]`` (validated inputs); returns fp32
    ``[T, C]``, zeros where a token has no slot."""
    k, _, c = a.shape
    t = torch.zeros((x.shape[0], c), dtype=torch.float32, device=x.device)
    if meta.max_slot_tokens == 0 or c == 0 or k == 0:
        return t
    block_n = _shrink_block_n(c)
    k_per_split = triton.cdiv(triton.cdiv(k, split_k), BLOCK_K) * BLOCK_K
    split_k = triton.cdiv(k, k_per_split)
    grid = (triton.cdiv(meta.max_slot_tokens, BLOCK_M) * split_k, triton.cdiv(c, block_n), meta.num_slots)
    _lora_shrink_kernel[grid](
        x,
        a,
        t,
        meta.sorted_tokens,
        meta.slot_starts,
        meta.slot_counts,
        k,
        c,
        k_per_split,
        x.stride(0),
        a.stride(0),
        a.stride(1),
        t.stride(0),
        SPLIT_K=split_k,
        BLOCK_M=BLOCK_M,
        BLOCK_N=block_n,
        BLOCK_K=BLOCK_K,
        UPCAST=upcast_dots(x.dtype),
        FP32_DOTS=fp32_dots(x.dtype),
    )
    return t


def lora_expand(
    y: torch.Tensor, t: torch.Tensor, b: torch.Tensor, meta: LoRAMetadata, part_sizes: tuple[int, ...]
) -> None:
    """Adds to ``y`` ``[T, out]``, in place, each part's ``t`` section times its tokens' slot of ``b`` ``[slots,
    C, out]`` (validated inputs: up to ``MAX_LORA_PARTS`` ``part_sizes`` split ``out``, ``C = parts * rank``)."""
    parts = len(part_sizes)
    rank = b.shape[1] // parts
    if meta.max_slot_tokens == 0 or rank == 0:
        return
    n0, n1, n2 = (*part_sizes, 0, 0)[:MAX_LORA_PARTS]
    grid = (
        triton.cdiv(meta.max_slot_tokens, BLOCK_M),
        triton.cdiv(max(part_sizes), EXPAND_BLOCK_N),
        meta.num_slots * parts,
    )
    _lora_expand_kernel[grid](
        t,
        b,
        y,
        meta.sorted_tokens,
        meta.slot_starts,
        meta.slot_counts,
        n0,
        n1,
        n2,
        rank,
        t.stride(0),
        b.stride(0),
        b.stride(1),
        y.stride(0),
        NUM_PARTS=parts,
        BLOCK_M=BLOCK_M,
        BLOCK_N=EXPAND_BLOCK_N,
        BLOCK_K=min(BLOCK_K, pow2(rank, 16)),
        FP32_DOTS=fp32_dots(b.dtype),
    )
