"""The KV-cache write kernel scatters each token to its slot and touches nothing else."""

from __future__ import annotations

import pytest
import torch
from kernel_lane import DTYPES, KERNEL_DEVICE, LANE, distinct_slots, on_device

pytestmark = LANE


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("num_kv_heads", "head_dim"), [(1, 128), (3, 64)])
def test_write_kv_matches_reference(triton_ops, torch_ops, dtype, num_kv_heads, head_dim):
    gen = torch.Generator().manual_seed(1)
    num_blocks, block_size, num_tokens = 300, 16, 7
    # keys and values as strided views of one fused projection, slots spread up to the last block
    fused = on_device(torch.randn(num_tokens, 4 + 2 * num_kv_heads, head_dim, generator=gen).to(dtype))
    key, value = fused[:, 4 : 4 + num_kv_heads], fused[:, 4 + num_kv_heads :]
    slots = on_device(distinct_slots(num_tokens, 0, num_blocks * block_size, gen))
    k_cache = on_device(torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen).to(dtype))
    v_cache = on_device(torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen).to(dtype))
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    torch_ops.write_kv(key, value, expected_k, expected_v, slots)

    triton_ops.write_kv(key, value, k_cache, v_cache, slots)

    assert torch.equal(k_cache, expected_k)
    assert torch.equal(v_cache, expected_v)


def test_write_kv_skips_padding_slots_and_converts_dtype(triton_ops):
    key = torch.randn(3, 2, 64, device=KERNEL_DEVICE)
    value = torch.randn(3, 2, 64, device=KERNEL_DEVICE)
    k_cache = torch.zeros(4, 8, 2, 64, dtype=torch.float16, device=KERNEL_DEVICE)
    v_cache = torch.zeros_like(k_cache)

    slots = torch.tensor([-1, 9, 31], dtype=torch.int32, device=KERNEL_DEVICE)
    triton_ops.write_kv(key, value, k_cache, v_cache, slots)

    assert torch.equal(k_cache[1, 1], key[1].half()) and torch.equal(v_cache[3, 7], value[2].half())
    assert int((k_cache != 0).any(-1).any(-1).sum()) == 2
