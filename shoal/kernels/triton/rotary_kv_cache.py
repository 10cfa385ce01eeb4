"""Rotary embedding fused with the KV-cache write: one launch where ``rotary`` and ``write_kv`` take two.

Grid ``(num_tokens,)``: one program per token loads its position's cosines and sines once, rotates every query
head in place (as ``rotary.py`` does), then rotates the token's key heads in registers and stores them straight
into slot ``slot_mapping[t]`` of the key cache, and copies its value heads into the value cache. The rotated
keys never go back to the projection's buffer: attention reads them from the cache. Only the first
``rotary_dim`` features rotate (partial rotary); the rest of a key head is copied as it is. A rotated key is
rounded to the key's dtype, then to the cache's, so the cache holds exactly what the two separate kernels
write. A position outside the cache rotates by angle zero; a negative slot (a padding token) or one past the
cache writes nothing, though its query is still rotated.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.triton.launch import pow2
from shoal.kernels.triton.rotary import load_cos_sin, rotate_heads


@triton.jit
def _rotary_write_kv_kernel(
    positions_ptr,
    q_ptr,
    key_ptr,
    value_ptr,
    cos_sin_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    max_position,
    num_heads,
    num_slots,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cos_sin,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    BLOCK_KVH: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cos, sin = load_cos_sin(positions_ptr, cos_sin_ptr, token, max_position, stride_cos_sin, HALF, BLOCK_HALF)
    rotate_heads(q_ptr + token * stride_qt, stride_qh, num_heads, cos, sin, HALF, BLOCK_H, BLOCK_HALF)

    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if (slot < 0) | (slot >= num_slots):
        return
    offs = tl.arange(0, BLOCK_HALF)
    offs_h = tl.arange(0, BLOCK_KVH)[:, None]
    dst = slot * (NUM_KV_HEADS * HEAD_DIM) + offs_h * HEAD_DIM
    key = key_ptr + token * stride_kt + offs_h * stride_kh
    mask = (offs_h < NUM_KV_HEADS) & (offs[None, :] < HALF)
    k1 = tl.load(key + offs[None, :], mask=mask, other=0.0).to(tl.float32)
    k2 = tl.load(key + HALF + offs[None, :], mask=mask, other=0.0).to(tl.float32)
    r1 = (k1 * cos[None, :] - k2 * sin[None, :]).to(key_ptr.dtype.element_ty)
    r2 = (k2 * cos[None, :] + k1 * sin[None, :]).to(key_ptr.dtype.element_ty)
    tl.store(k_cache_ptr + dst + offs[None, :], r1.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(k_cache_ptr + dst + HALF + offs[None, :], r2.to(k_cache_ptr.dtype.element_ty), mask=mask)
    offs_d = tl.arange(0, BLOCK_D)[None, :]
    if 2 * HALF < HEAD_DIM:  # partial rotary: the features past rotary_dim are copied unrotated
        tail = (offs_h < NUM_KV_HEADS) & (offs_d >= 2 * HALF) & (offs_d < HEAD_DIM)
        unrotated = tl.load(key + offs_d, mask=tail)
        tl.store(k_cache_ptr + dst + offs_d, unrotated.to(k_cache_ptr.dtype.element_ty), mask=tail)
    full = (offs_h < NUM_KV_HEADS) & (offs_d < HEAD_DIM)
    value = tl.load(value_ptr + token * stride_vt + offs_h * stride_vh + offs_d, mask=full)
    tl.store(v_cache_ptr + dst + offs_d, value.to(v_cache_ptr.dtype.element_ty), mask=full)


def rotary_write_kv(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> torch.Tensor:
    """Rotates ``query`` ``[T, H, D]`` in place and writes rotated ``key`` and ``value`` ``[T, KVH, D]`` at
    ``slot_mapping``; returns ``query`` (validated inputs; ``key`` is left as it was)."""
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key.shape[1]
    half = cos_sin_cache.shape[-1] // 2
    if num_tokens:
        _rotary_write_kv_kernel[(num_tokens,)](
            positions,
            query,
            key,
            value,
            cos_sin_cache,
            k_cache,
            v_cache,
            slot_mapping,
            cos_sin_cache.shape[0],
            num_heads,
            k_cache.shape[0] * k_cache.shape[1],
            query.stride(0),
            query.stride(1),
            key.stride(0),
            key.stride(1),
            value.stride(0),
            value.stride(1),
            cos_sin_cache.stride(0),
            HALF=half,
            BLOCK_HALF=pow2(half),
            BLOCK_H=pow2(num_heads),
            NUM_KV_HEADS=num_kv_heads,
            BLOCK_KVH=pow2(num_kv_heads),
            HEAD_DIM=head_dim,
            BLOCK_D=pow2(head_dim),
        )
    return query
