"""Paged prefill / chunked-prefill attention: packed variable-length query chunks, causal over the KV cache.

Grid ``(num_seqs, cdiv(max_query_len, BLOCK_Q), num_kv_heads)``. Sequence ``s`` owns the query rows
``query_start_loc[s]:query_start_loc[s + 1]``; its new tokens are the last ``query_len`` of its ``seq_len``
cached positions (this step's keys are written before attention), so a chunk attends to earlier chunks, a
prefix-cache hit and itself through the same block-table walk, with the causal mask
``key_pos <= query_pos``. Programs past a short sequence's chunk return at once, so one launch serves any mix
of prefills, chunks and decodes.

A tile packs ``BLOCK_Q`` query tokens times the ``group`` query heads of one KV head into its rows (row
``r`` is token ``r // BLOCK_G``, head ``r % BLOCK_G``), so each key tile is loaded once per group. The KV loop
stops at the tile's last query position: causality skips the upper triangle. Rows that hold no real query
(padding heads or tokens past the chunk) take the position of the chunk's last token, so they see what it
sees and their running max ends finite.

With a sliding window ``W`` (``WINDOW``) row ``r`` sees positions ``q_pos[r] - W + 1 .. q_pos[r]``, and the
KV loop starts at the tile's first row's window start, not at 0: every tile before it is outside every row's
window and is never read. Every tile the loop does visit holds a position some row of the tile sees (the rows
are consecutive positions), and since a query tile spans no more positions than a KV tile
(``BLOCK_Q <= BLOCK_N``), every row's window starts inside the first one, so no row's running max stays
``-inf``. A soft cap (``SOFTCAP``) is applied to each score in ``attend_kv_tile``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.triton.launch import fp32_dots, pow2, upcast_dots
from shoal.kernels.triton.paged_kv import attend_kv_tile, score_scales

BLOCK_M = 64
BLOCK_N = 64


def num_warps(block_d: int) -> int:
    """8 warps for 128-wide heads: 4 would spill the 64 x 128 tiles out of registers (234 vs 255+ on sm_90)."""
    return 8 if block_d >= 128 else 4


@triton.jit
def _prefill_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    query_start_loc_ptr,
    out_ptr,
    qk_scale,
    softcap,
    window,
    num_blocks,
    table_width,
    num_tokens,
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
    BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    FP32_DOTS: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    seq = tl.program_id(0)
    q_block = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if q_block * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - q_len

    rows = tl.arange(0, BLOCK_Q * BLOCK_G)
    token = q_block * BLOCK_Q + rows // BLOCK_G
    g = rows % BLOCK_G
    heads = kv_head * GROUP + g
    row_valid = (token < q_len) & (g < GROUP) & (q_start + token < num_tokens)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_mask = offs_d < HEAD_DIM
    q_rows = (q_start + token).to(tl.int64) * stride_qt + heads * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=row_valid[:, None] & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    q_pos = context + tl.minimum(token, q_len - 1)
    key_end = context + tl.minimum((q_block + 1) * BLOCK_Q, q_len)
    if WINDOW:
        tl.static_assert(BLOCK_Q <= BLOCK_N, "each row's window must start in the first KV tile")
        first_pos = q_pos - window + 1
        key_start = tl.maximum(context + q_block * BLOCK_Q - window + 1, 0)
    else:
        first_pos = q_pos  # unused: the kernel masks no window
        key_start = 0

    m_i = tl.full([BLOCK_Q * BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q * BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_Q * BLOCK_G, BLOCK_D], tl.float32)
    table_ptr = block_tables_ptr + seq * stride_bt
    for start in range(key_start, key_end, BLOCK_N):
        acc, m_i, l_i = attend_kv_tile(
            q,
            acc,
            m_i,
            l_i,
            k_cache_ptr,
            v_cache_ptr,
            table_ptr,
            start + offs_n,
            key_start,
            key_end,
            q_pos,
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

    out = acc / l_i[:, None]
    o_rows = (q_start + token).to(tl.int64) * stride_ot + heads * stride_oh
    tl.store(
        out_ptr + o_rows[:, None] + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=row_valid[:, None] & d_mask[None, :],
    )


def paged_prefill_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_query_len: int,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Causal attention of the packed ``query`` ``[num_tokens, num_heads, head_dim]`` over the paged cache, each
    query seeing only its last ``sliding_window`` positions when one is given, scores soft-capped by ``softcap``
    when that is.

    Inputs are assumed validated (``shoal.kernels.validation``).
    """
    num_tokens, num_heads, head_dim = query.shape
    num_blocks, block_size, num_kv_heads = k_cache.shape[:3]
    num_seqs = seq_lens.shape[0]
    group = num_heads // num_kv_heads
    block_g = pow2(group)
    block_q = max(1, BLOCK_M // block_g)
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    if num_tokens == 0 or num_seqs == 0:
        return out
    _prefill_kernel[(num_seqs, triton.cdiv(max_query_len, block_q), num_kv_heads)](
        query,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        out,
        *score_scales(scale, softcap),
        sliding_window or 0,
        num_blocks,
        block_tables.shape[1],
        num_tokens,
        query.stride(0),
        query.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        GROUP=group,
        BLOCK_G=block_g,
        BLOCK_Q=block_q,
        HEAD_DIM=head_dim,
        BLOCK_D=pow2(head_dim, 16),
        BLOCK_SIZE=block_size,
        BLOCK_N=BLOCK_N,
        UPCAST=upcast_dots(query.dtype),
        FP32_DOTS=fp32_dots(query.dtype),
        WINDOW=sliding_window is not None,
        SOFTCAP=softcap is not None,
        num_warps=num_warps(pow2(head_dim, 16)),
    )
    return out
