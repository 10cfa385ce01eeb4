"""RoPE fused with the KV-cache write: the reference's rotary-then-write, and exactly the two separate kernels'."""

from __future__ import annotations

import pytest
import torch
from kernel_lane import DTYPES, LANE, distinct_slots, on_device

pytestmark = LANE

NUM_BLOCKS, BLOCK_SIZE = 300, 16


def _cos_sin_cache(max_position: int, rotary_dim: int) -> torch.Tensor:
    inv_freq = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return on_device(torch.cat((angles.cos(), angles.sin()), dim=-1))


def _step(num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, num_tokens: int = 7, seed: int = 0):
    """A step's q, k, v (strided views of one fused projection), slots in the top half of a large cache (the
    very last slot among them), positions that are not contiguous, and random caches."""
    gen = torch.Generator().manual_seed(seed)
    fused = on_device(torch.randn(num_tokens, num_heads + 2 * num_kv_heads, head_dim, generator=gen).to(dtype))
    q, k, v = fused.split((num_heads, num_kv_heads, num_kv_heads), dim=1)
    top = NUM_BLOCKS // 2 * BLOCK_SIZE
    slots = distinct_slots(num_tokens, top, NUM_BLOCKS * BLOCK_SIZE, gen)
    positions = torch.tensor([0, 1023, 5, 6, 300, 77, 1][:num_tokens])
    shape = (NUM_BLOCKS, BLOCK_SIZE, num_kv_heads, head_dim)
    caches = (
        on_device(torch.randn(shape, generator=gen).to(dtype)),
        on_device(torch.randn(shape, generator=gen).to(dtype)),
    )
    return fused, q, k, v, on_device(positions), on_device(slots), caches


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim", "rotary_dim"),
    [(4, 2, 64, 64), (9, 3, 80, 48), (8, 1, 128, 96)],  # GQA; partial rotary of an odd head_dim; one KV head
)
def test_rotary_write_kv_matches_the_reference(
    triton_ops, torch_ops, close, dtype, num_heads, num_kv_heads, head_dim, rotary_dim
):
    fused, q, k, v, positions, slots, (k_cache, v_cache) = _step(num_heads, num_kv_heads, head_dim, dtype)
    cos_sin = _cos_sin_cache(1024, rotary_dim)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    expected_q = torch_ops.rotary_write_kv(positions, q.clone(), k, v, cos_sin, expected_k, expected_v, slots)
    keys_and_values = fused[:, num_heads:].clone()

    out_q = triton_ops.rotary_write_kv(positions, q, k, v, cos_sin, k_cache, v_cache, slots)

    assert out_q.data_ptr() == q.data_ptr()  # rotated in place
    close(q, expected_q)
    close(k_cache, expected_k)
    assert torch.equal(v_cache, expected_v)
    assert torch.equal(fused[:, num_heads:], keys_and_values)  # the new keys themselves are left as they were
    untouched = torch.ones(NUM_BLOCKS * BLOCK_SIZE, dtype=torch.bool, device=slots.device)
    untouched[slots] = False
    assert torch.equal(k_cache.flatten(0, 1)[untouched], expected_k.flatten(0, 1)[untouched])


@pytest.mark.parametrize(
    ("dtype", "cache_dtype"), [(torch.float16, torch.float16), (torch.float16, torch.float32)], ids=str
)
def test_rotary_write_kv_writes_what_rotary_then_write_kv_write(triton_ops, dtype, cache_dtype):
    """Bit for bit the two kernels it replaces, a rotated key rounded to its own dtype before the cache's."""
    _, q, k, v, positions, slots, (k_cache, v_cache) = _step(8, 2, 128, dtype, seed=3)
    k_cache, v_cache = k_cache.to(cache_dtype), v_cache.to(cache_dtype)
    cos_sin = _cos_sin_cache(1024, 64)
    apart_q, apart_k = triton_ops.rotary(positions, q.clone(), k.clone(), cos_sin)
    apart_k_cache, apart_v_cache = k_cache.clone(), v_cache.clone()
    triton_ops.write_kv(apart_k, v, apart_k_cache, apart_v_cache, slots)

    fused_q = triton_ops.rotary_write_kv(positions, q, k, v, cos_sin, k_cache, v_cache, slots)

    assert torch.equal(fused_q, apart_q)
    assert torch.equal(k_cache, apart_k_cache) and torch.equal(v_cache, apart_v_cache)


def test_padding_and_out_of_range_slots_write_nothing_yet_their_queries_rotate(triton_ops, torch_ops):
    _, q, k, v, _, _, (k_cache, v_cache) = _step(4, 2, 64, torch.float32, num_tokens=3)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    cos_sin = _cos_sin_cache(64, 64)
    positions = on_device(torch.tensor([3, 9, 70]))  # the last is past the table: it rotates by zero
    expected_q, _ = torch_ops.rotary(positions[:2], q[:2].clone(), k[:2].clone(), cos_sin)
    unrotated = q[2].clone()

    triton_ops.rotary_write_kv(
        positions, q, k, v, cos_sin, k_cache, v_cache, on_device(torch.tensor([-1, NUM_BLOCKS * BLOCK_SIZE, -5]))
    )

    torch.testing.assert_close(q[:2], expected_q)
    assert torch.equal(q[2], unrotated)
    assert torch.equal(k_cache, before_k) and torch.equal(v_cache, before_v)
