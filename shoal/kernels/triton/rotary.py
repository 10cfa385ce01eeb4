"""Rotary position embedding applied to queries and keys in place (neox rotate-half layout).

Grid ``(num_tokens,)``: one program per token loads that position's cosines and sines once and rotates every
query head and key head with them, so the cache row is read once per token rather than once per head. Only
the first ``rotary_dim`` features rotate (partial rotary); the rest are left untouched. Llama-3 frequency
scaling is already baked into the cache the model builds, so the kernel never sees it. Math runs in fp32 and
is rounded once on store. A position outside the cache rotates by angle zero (its row is left as it was)
instead of reading past it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.triton.launch import pow2


@triton.jit
def rotate_heads(
    x_ptr, stride_h, num_heads, cos, sin, HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr
):
    offs_h = tl.arange(0, BLOCK_H)
    offs = tl.arange(0, BLOCK_HALF)
    mask = (offs_h[:, None] < num_heads) & (offs[None, :] < HALF)
    first = x_ptr + offs_h[:, None] * stride_h + offs[None, :]
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos[None, :] - x2 * sin[None, :]).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(first + HALF, (x2 * cos[None, :] + x1 * sin[None, :]).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def load_cos_sin(
    positions_ptr, cache_ptr, token, max_position, stride_cache, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr
):
    """The token's cosines and sines in fp32; a position outside the cache gets angle zero's (1 and 0)."""
    pos = tl.load(positions_ptr + token).to(tl.int64)
    ok = (pos >= 0) & (pos < max_position)
    row = cache_ptr + tl.where(ok, pos, 0) * stride_cache
    offs = tl.arange(0, BLOCK_HALF)
    cos = tl.where(ok, tl.load(row + offs, mask=offs < HALF, other=1.0).to(tl.float32), 1.0)
    sin = tl.where(ok, tl.load(row + HALF + offs, mask=offs < HALF, other=0.0).to(tl.float32), 0.0)
    return cos, sin


@triton.jit
def _rotary_kernel(
    positions_ptr,
    q_ptr,
    k_ptr,
    cache_ptr,
    max_position,
    num_heads,
    num_kv_heads,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cache,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_KVH: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cos, sin = load_cos_sin(positions_ptr, cache_ptr, token, max_position, stride_cache, HALF, BLOCK_HALF)
    rotate_heads(q_ptr + token * stride_qt, stride_qh, num_heads, cos, sin, HALF, BLOCK_H, BLOCK_HALF)
    rotate_heads(k_ptr + token * stride_kt, stride_kh, num_kv_heads, cos, sin, HALF, BLOCK_KVH, BLOCK_HALF)


def rotary_embedding_(
    positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotates ``query`` ``[T, H, D]`` and ``key`` ``[T, KVH, D]`` in place; returns them (validated inputs)."""
    num_tokens, num_heads = query.shape[:2]
    num_kv_heads = key.shape[1]
    half = cos_sin_cache.shape[-1] // 2
    if num_tokens:
        _rotary_kernel[(num_tokens,)](
            positions,
            query,
            key,
            cos_sin_cache,
            cos_sin_cache.shape[0],
            num_heads,
            num_kv_heads,
            query.stride(0),
            query.stride(1),
            key.stride(0),
            key.stride(1),
            cos_sin_cache.stride(0),
            HALF=half,
            BLOCK_HALF=pow2(half),
            BLOCK_H=pow2(num_heads),
            BLOCK_KVH=pow2(num_kv_heads),
        )
    return query, key
