"""Paged decode attention: one new query token per sequence against its KV blocks (flash-decoding).

Grid ``(num_seqs, num_kv_heads, num_splits)``. A program packs the ``group`` query heads that share one KV
head into the rows of a single tile (padded to 16 rows so ``tl.dot`` runs on tensor cores), so each key and
value is loaded once per group instead of once per query head: decode is bound by reading the KV cache, and
GQA divides that traffic by the group size. The tile walks ``BLOCK_N`` positions at a time; each position finds
its block through the block table, so the tile width is independent of the cache's block size.

With few sequences there are too few programs to fill the GPU, so a sequence's tiles are cut into
``num_splits`` segments processed in parallel; each writes its unnormalised output with its running max and
sum, and ``_merge_kernel`` rescales them into the final row. With one split the first kernel writes the output
itself. Softmax runs online in fp32 in the exp2 domain (the scale carries ``log2(e)``).

With a sliding window ``W`` (``WINDOW``) a sequence's query sees only its last ``W`` positions, so the tiles
counted and cut into segments are those from the one holding the window's first position: no segment reads,
or even loops over, a tile wholly before the window, and a long context with a short window splits (and costs)
like a short context. A soft cap (``SOFTCAP``) is applied to each score in ``attend_kv_tile``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.triton.launch import fp32_dots, pow2, upcast_dots
from shoal.kernels.triton.paged_kv import attend_kv_tile, score_scales

BLOCK_N = 32  # with 4 warps and head_dim 128: 168 registers, no spills on sm_90 (64 spills)
NUM_WARPS = 4
PROGRAMS_PER_SM = 8  # ~3 decode programs fit an SM at once (168 registers x 128 threads): 2-3 waves of them
MIN_TOKENS_PER_SPLIT = 128  # 4 tiles: a segment's fixed cost (its query, its partial row) stays a few percent
MAX_SPLITS = 64


@triton.jit
def _decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    out_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    qk_scale,
    softcap,
    window,
    num_blocks,
    table_width,
    stride_qt,
    stride_qh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_bt,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    UPCAST: tl.constexpr,
    FP32_DOTS: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    heads = kv_head * GROUP + offs_g
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM
    q = tl.load(
        q_ptr + seq * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)

    num_tiles = tl.cdiv(seq_len, BLOCK_N)
    last_pos = tl.full([BLOCK_G], 0, tl.int32) + seq_len - 1
    if WINDOW:
        window_start = tl.maximum(seq_len - window, 0)
        first_tile = window_start // BLOCK_N
        first_pos = tl.full([BLOCK_G], 0, tl.int32) + window_start
    else:
        window_start = 0  # unused: the kernel masks no window
        first_tile = 0
        first_pos = last_pos  # unused too
    tiles_per_split = tl.cdiv(num_tiles - first_tile, NUM_SPLITS)  # tiles counted from the window's first
    tile_lo = split * tiles_per_split
    tile_hi = tl.minimum(tile_lo + tiles_per_split, num_tiles - first_tile)
    first_key = first_tile * BLOCK_N

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    table_ptr = block_tables_ptr + seq * stride_bt
    for tile in range(tile_lo, tile_hi):
        acc, m_i, l_i = attend_kv_tile(
            q,
            acc,
            m_i,
            l_i,
            k_cache_ptr,
            v_cache_ptr,
            table_ptr,
            first_key + tile * BLOCK_N + offs_n,
            window_start,
            seq_len,
            last_pos,
            first_pos,
            qk_scale,
            softcap,
            num_blocks,
            table_width,
            kv_head,
            stride_cb,
            stride_ct,
            stride_ch,
            offs_d,
            d_mask,
            BLOCK_SIZE,
            UPCAST,
            FP32_DOTS,
            WINDOW,
            SOFTCAP,
        )

    out_mask = g_mask[:, None] & d_mask[None, :]
    if NUM_SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(
            out_ptr + seq * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )
    else:
        num_heads = tl.num_programs(1) * GROUP
        part = (seq * num_heads + heads) * NUM_SPLITS + split  # [BLOCK_G] row of [S, H, NUM_SPLITS]
        tl.store(part_max_ptr + part, m_i, mask=g_mask)
        tl.store(part_sum_ptr + part, l_i, mask=g_mask)
        tl.store(part_acc_ptr + part[:, None] * BLOCK_D + offs_d[None, :], acc, mask=out_mask)


@triton.jit
def _merge_kernel(
    out_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    stride_ot,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < NUM_SPLITS
    part = (seq * tl.num_programs(1) + head) * NUM_SPLITS + offs_s
    m = tl.load(part_max_ptr + part, mask=s_mask, other=float("-inf"))
    sums = tl.load(part_sum_ptr + part, mask=s_mask, other=0.0)
    acc = tl.load(part_acc_ptr + part[:, None] * BLOCK_D + offs_d[None, :], mask=s_mask[:, None], other=0.0)
    m_all = tl.max(m, 0)
    weight = tl.where(m > float("-inf"), tl.exp2(m - m_all), 0.0)  # empty segments weigh nothing
    out = tl.sum(acc * weight[:, None], 0) / tl.sum(sums * weight, 0)
    tl.store(
        out_ptr + seq * stride_ot + head * stride_oh + offs_d,
        out.to(out_ptr.dtype.element_ty),
        mask=offs_d < HEAD_DIM,
    )


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """The fewest segments per sequence that give every SM ``PROGRAMS_PER_SM`` programs, each segment at least
    ``MIN_TOKENS_PER_SPLIT`` tokens long, at most ``MAX_SPLITS``; one where the batch alone fills the SMs.

    A decode program reads one KV head's context for one sequence; a program alone on an SM cannot keep its
    share of memory bandwidth busy (1 x 8,192 tokens over 8 KV heads in 128 programs on 132 SMs read at 6% of
    peak), so a small batch with a long context is cut into several waves of programs instead of one."""
    programs = max(1, num_seqs * num_kv_heads)
    wanted = triton.cdiv(PROGRAMS_PER_SM * num_sms, programs)
    by_length = max(1, max_seq_len // MIN_TOKENS_PER_SPLIT)
    return max(1, min(wanted, by_length, MAX_SPLITS))


def paged_decode_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    num_splits: int = 1,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Attention of ``query`` ``[num_seqs, num_heads, head_dim]`` (one token each) over the paged cache.

    Inputs are assumed validated (``shoal.kernels.validation``); ``num_splits`` segments per sequence (of the
    tiles inside its ``sliding_window`` when one is given); scores soft-capped by ``softcap`` when given.
    """
    num_seqs, num_heads, head_dim = query.shape
    num_blocks, block_size, num_kv_heads = k_cache.shape[:3]
    group = num_heads // num_kv_heads
    block_d = pow2(head_dim, 16)
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    if num_seqs == 0:
        return out
    if num_splits > 1:
        part_acc = torch.empty((num_seqs, num_heads, num_splits, block_d), dtype=torch.float32, device=query.device)
        part_max = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=query.device)
        part_sum = torch.empty_like(part_max)
    else:
        part_acc = part_max = part_sum = out
    _decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        query,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        out,
        part_acc,
        part_max,
        part_sum,
        *score_scales(scale, softcap),
        sliding_window or 0,
        num_blocks,
        block_tables.shape[1],
        query.stride(0),
        query.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        GROUP=group,
        BLOCK_G=pow2(group, 16),
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_SIZE=block_size,
        BLOCK_N=BLOCK_N,
        NUM_SPLITS=num_splits,
        UPCAST=upcast_dots(query.dtype),
        FP32_DOTS=fp32_dots(query.dtype),
        WINDOW=sliding_window is not None,
        SOFTCAP=softcap is not None,
        num_warps=NUM_WARPS,
    )
    if num_splits > 1:
        _merge_kernel[(num_seqs, num_heads)](
            out,
            part_acc,
            part_max,
            part_sum,
            out.stride(0),
            out.stride(1),
            HEAD_DIM=head_dim,
            BLOCK_D=block_d,
            NUM_SPLITS=num_splits,
            BLOCK_SPLITS=pow2(num_splits),
        )
    return out
