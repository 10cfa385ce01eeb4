"""KV-cache write: scatter this step's keys and values into their slots.

Grid ``(num_tokens,)``: one program moves one token's ``[num_kv_heads, head_dim]`` keys and values to slot
``slot_mapping[t]`` (block ``slot // block_size``, offset ``slot % block_size``); the cache is contiguous, so
a slot is one flat row of ``num_kv_heads * head_dim`` elements. New keys may be strided views of the fused
QKV projection. A negative slot (a padding token) is skipped, and a slot past the cache is never written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.triton.launch import pow2


@triton.jit
def _write_kv_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    num_slots,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if (slot < 0) | (slot >= num_slots):
        return
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h[:, None] < NUM_KV_HEADS) & (offs_d[None, :] < HEAD_DIM)
    src = offs_h[:, None] * stride_kh + offs_d[None, :]
    dst = slot * (NUM_KV_HEADS * HEAD_DIM) + offs_h[:, None] * HEAD_DIM + offs_d[None, :]
    k = tl.load(key_ptr + token * stride_kt + src, mask=mask)
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    src = offs_h[:, None] * stride_vh + offs_d[None, :]
    v = tl.load(value_ptr + token * stride_vt + src, mask=mask)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv_cache(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Writes ``key``/``value`` ``[num_tokens, num_kv_heads, head_dim]`` at ``slot_mapping`` (validated inputs)."""
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    _write_kv_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        v_cache,
        slot_mapping,
        k_cache.shape[0] * k_cache.shape[1],
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_H=pow2(num_kv_heads),
        BLOCK_D=pow2(head_dim),
    )
