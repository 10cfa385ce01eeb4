"""The inner step both attention kernels share: one KV tile through the block table, one online-softmax update.

Each of the tile's ``BLOCK_N`` positions finds its block in the sequence's block-table row, so the tile width
does not depend on the cache's block size and a tile may straddle blocks. Position ``p`` counts for row ``r``
when ``p < key_end`` and ``p <= last_pos[r]`` (the causal limit); positions that fail the first test, or whose
block id is outside the cache, are never loaded. Scores are in the exp2 domain (``qk_scale`` carries log2 e).

Two ``tl.constexpr`` switches add what some models need, so the plain kernels compile exactly as before:

- ``WINDOW``: ``p`` must also be ``>= first_pos[r]`` (row ``r``'s sliding-window start), and positions before
  ``key_start`` (the earliest any row of the tile sees) are not loaded either. The callers start their KV
  loop in the tile holding every row's window start, so each row's running max is finite after the first
  tile, as without a window.
- ``SOFTCAP``: Gemma 2's ``c * tanh(s / c)`` on each scaled score ``s``. The launcher passes
  ``qk_scale = scale / c`` and ``softcap = c * log2 e``, so the kernel takes ``tanh`` of the dot product times
  ``qk_scale`` and lands in the exp2 domain with one multiply. ``tanh`` is ``1 - 2 / (exp2(2 x log2 e) + 1)``:
  one ``exp2``, which the interpreter and every GPU have (its argument clamped where ``tanh`` is already
  +-1 in fp32, so it never overflows).
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # launchers multiply the softmax scale by it: exp(x) == exp2(x * log2 e)


def score_scales(scale: float, softcap: float | None) -> tuple[float, float]:
    """The kernels' ``(qk_scale, softcap)`` arguments for a softmax ``scale`` and an optional cap."""
    if softcap is None:
        return scale * LOG2E, 0.0
    return scale / softcap, softcap * LOG2E


@triton.jit
def _tanh(x):
    x = tl.minimum(tl.maximum(x, -16.0), 16.0)  # tanh is +-1 in fp32 past +-9.1; exp2 then cannot overflow
    return 1.0 - 2.0 / (tl.exp2(x * (2.0 * 1.4426950408889634)) + 1.0)


@triton.jit
def attend_kv_tile(
    q,
    acc,
    m_i,
    l_i,
    k_cache_ptr,
    v_cache_ptr,
    table_ptr,
    pos,
    key_start,
    key_end,
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
    BLOCK_SIZE: tl.constexpr,
    UPCAST: tl.constexpr,
    FP32_DOTS: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    col = pos // BLOCK_SIZE
    valid = (pos < key_end) & (col < table_width)
    if WINDOW:
        valid = valid & (pos >= key_start)
    block = tl.load(table_ptr + col, mask=valid, other=0)
    valid = valid & (block >= 0) & (block < num_blocks)
    kv_off = block.to(tl.int64) * stride_cb + (pos % BLOCK_SIZE) * stride_ct + kv_head * stride_ch
    kv_mask = valid[:, None] & d_mask[None, :]
    k = tl.load(k_cache_ptr + kv_off[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_cache_ptr + kv_off[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    if FP32_DOTS:  # fp32 operands: full fp32 products, not the TF32 a GPU would use by default
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
    else:
        s = tl.dot(q, tl.trans(k)) * qk_scale
    if SOFTCAP:
        s = _tanh(s) * softcap
    visible = valid[None, :] & (pos[None, :] <= last_pos[:, None])
    if WINDOW:
        visible = visible & (pos[None, :] >= first_pos[:, None])
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if FP32_DOTS:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i
