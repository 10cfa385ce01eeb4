"""RMSNorm (plain and with the residual add), rotary embedding and SiLU-and-mul against the torch reference."""

from __future__ import annotations

import pytest
import torch
from kernel_lane import DTYPES, LANE, on_device

pytestmark = LANE


def _randn(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return on_device(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [64, 200])
def test_rms_norm_matches_reference(triton_ops, torch_ops, close, dtype, hidden):
    x = _randn(5, 3, hidden, dtype=dtype)
    weight = _randn(hidden, dtype=dtype, seed=1)

    close(triton_ops.rms_norm(x, weight, 1e-6), torch_ops.rms_norm(x, weight, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_rms_norm_returns_norm_of_sum_and_the_sum(triton_ops, torch_ops, close, dtype):
    x = _randn(7, 2 * 200, dtype=dtype)[:, :200]  # a strided row view
    residual = _randn(7, 200, dtype=dtype, seed=1)
    weight = _randn(200, dtype=dtype, seed=2)

    out, total = triton_ops.add_rms_norm(x, residual, weight, 1e-5)

    expected_out, expected_total = torch_ops.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(total, expected_total)
    close(out, expected_out)


def _cos_sin_cache(max_position: int, rotary_dim: int) -> torch.Tensor:
    inv_freq = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim", "rotary_dim"), [(9, 3, 64, 64), (4, 1, 128, 64)])
def test_rotary_rotates_query_and_key_in_place(
    triton_ops, torch_ops, close, dtype, num_heads, num_kv_heads, head_dim, rotary_dim
):
    fused = _randn(6, num_heads + 2 * num_kv_heads, head_dim, dtype=dtype)
    query, key = fused[:, :num_heads], fused[:, num_heads : num_heads + num_kv_heads]
    positions = on_device(torch.tensor([0, 1, 5, 1023, 77, 300]))
    cache = on_device(_cos_sin_cache(1024, rotary_dim))
    expected_q, expected_k = torch_ops.rotary(positions, query.clone(), key.clone(), cache)
    untouched = fused[:, num_heads + num_kv_heads :].clone()

    out_q, out_k = triton_ops.rotary(positions, query, key, cache)

    close(query, expected_q)
    close(key, expected_k)
    assert out_q.data_ptr() == query.data_ptr() and out_k.data_ptr() == key.data_ptr()
    assert torch.equal(fused[:, num_heads + num_kv_heads :], untouched)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [96, 1100])
def test_silu_and_mul_matches_reference(triton_ops, torch_ops, close, dtype, d):
    x = _randn(3, 2, 2 * d, dtype=dtype) * 4

    close(triton_ops.silu_and_mul(x), torch_ops.silu_and_mul(x))
