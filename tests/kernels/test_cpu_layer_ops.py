"""shoal's C kernel for a layer's small ops (RMSNorm with the residual add, RoPE with the KV-cache write,
SiLU-and-mul) against the torch path, on each instruction set it compiles to.

The kernel rounds where torch's composition of the same ops rounds, so the sums torch keeps (``x + residual``,
the values written to the cache, the rotated query and key in bf16) must be equal to the bit, and the rest
within a sum's reordering (fp32) or equal (bf16, whose rounding hides it on these sizes). Paths: ``-march=native``,
``-mno-avx512f`` (AVX2 at most), ``-march=x86-64`` (SSE2 only).
"""

from __future__ import annotations

import platform

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_lane import distinct_slots

from shoal.kernels import TorchOps, get_ops
from shoal.kernels.cpu.layer_ops import FLAGS, LayerOps, load_layer_ops
from shoal.kernels.cpu_ops import CpuOps

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the paths are x86's")

PATHS = {"native": (), "avx2-at-most": ("-mno-avx512f",), "sse2": ("-march=x86-64",)}
DTYPES = [torch.float32, torch.bfloat16]
ATOL = {torch.float32: 2e-6, torch.bfloat16: 0.0}  # outputs ~1: a sum's order in fp32; bf16 hides it
REFERENCE = TorchOps()


@pytest.fixture(scope="module", params=list(PATHS))
def kernel(request: pytest.FixtureRequest) -> LayerOps:
    return load_layer_ops((*FLAGS, *PATHS[request.param]))


def _randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def _close(out: torch.Tensor, expected: torch.Tensor) -> None:
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.float(), expected.float(), atol=ATOL[expected.dtype], rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("rows", "width"), [(1, 576), (7, 200), (3, 13), (300, 256)])  # 300 x 256: threaded
def test_add_rms_norm_returns_the_norm_of_the_sum_and_the_sum_itself(kernel, dtype, rows, width):
    x = _randn(rows, 2 * width, dtype=dtype, seed=0)[:, :width]  # a strided row view, as a projection's slice
    residual = _randn(rows, width, dtype=dtype, seed=1, scale=4.0)
    weight = _randn(width, dtype=dtype, seed=2)
    kept = x.clone(), residual.clone()

    done = kernel.rms_norm(x, weight, 1e-5, residual)

    assert done is not None
    out, total = done
    expected_out, expected_total = REFERENCE.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(total, expected_total)
    _close(out, expected_out)
    assert torch.equal(x, kept[0]) and torch.equal(residual, kept[1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("rows", "width"), [(1, 64), (5, 576), (2, 24)])
def test_rms_norm_without_a_residual_returns_the_input_as_the_sum(kernel, dtype, rows, width):
    x = _randn(rows, width, dtype=dtype, seed=3, scale=0.01)  # small values: eps matters
    weight = _randn(width, dtype=dtype, seed=4)

    done = kernel.rms_norm(x, weight, 1e-2)

    assert done is not None and done[1] is x
    _close(done[0], REFERENCE.rms_norm(x, weight, 1e-2))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("rows", "width"), [(1, 1536), (4, 100), (64, 1536)])  # 64 x 1536: threaded
def test_silu_and_mul_matches_torch(kernel, dtype, rows, width):
    x = _randn(rows, 2 * width, dtype=dtype, seed=5, scale=6.0)  # gates far into both tails of the sigmoid
    x[0, :4] = torch.tensor([-100.0, 100.0, 0.0, -0.0])

    out = kernel.silu_and_mul(x)

    assert out is not None
    _close(out, REFERENCE.silu_and_mul(x))


def _cos_sin_cache(max_position: int, rotary_dim: int) -> torch.Tensor:
    inv_freq = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


def _step(tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, seed: int):
    """q, k, v as the fused QKV projection leaves them (strided views of one buffer), random caches, distinct
    slots (the cache's very last among them) and scattered positions."""
    gen = torch.Generator().manual_seed(seed)
    fused = torch.randn(tokens, heads + 2 * kv_heads, head_dim, generator=gen).to(dtype)
    q, k, v = fused.split((heads, kv_heads, kv_heads), dim=1)
    shape = (40, 16, kv_heads, head_dim)
    caches = torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype)
    slots = distinct_slots(tokens, 0, 40 * 16, gen)
    positions = torch.randint(0, 2048, (tokens,), generator=gen)
    return fused, q, k, v, caches, slots, positions


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("table_dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("tokens", "heads", "kv_heads", "head_dim", "rotary_dim"),
    [(1, 9, 3, 64, 64), (7, 4, 2, 80, 48), (3, 8, 1, 128, 96), (600, 4, 2, 64, 64)],  # partial rotary; threaded
)
def test_rotary_write_kv_rotates_the_query_in_place_and_writes_rotated_keys_and_values(
    kernel, dtype, table_dtype, tokens, heads, kv_heads, head_dim, rotary_dim
):
    fused, q, k, v, (k_cache, v_cache), slots, positions = _step(tokens, heads, kv_heads, head_dim, dtype, seed=6)
    cos_sin = _cos_sin_cache(2048, rotary_dim).to(table_dtype)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    expected_q = TorchOps().rotary_write_kv(positions, q.clone(), k, v, cos_sin, expected_k, expected_v, slots)
    keys_and_values = fused[:, heads:].clone()

    out = kernel.rotary_write_kv(positions, q, k, v, cos_sin, k_cache, v_cache, slots)

    assert out is q
    assert torch.equal(q, expected_q)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    assert torch.equal(fused[:, heads:], keys_and_values)  # the key is left as it was


def test_a_negative_slot_is_padding_and_writes_nothing(kernel):
    _, q, k, v, (k_cache, v_cache), slots, positions = _step(3, 4, 2, 64, torch.float32, seed=7)
    slots[1] = -1
    kept_k, kept_v = k_cache.clone(), v_cache.clone()

    kernel.rotary_write_kv(positions, q, k, v, _cos_sin_cache(2048, 64), k_cache, v_cache, slots)

    written = slots[slots >= 0]
    flat_k, flat_v = k_cache.view(640, -1), v_cache.view(640, -1)
    untouched = torch.ones(640, dtype=torch.bool)
    untouched[written] = False
    assert torch.equal(flat_k[untouched], kept_k.view(640, -1)[untouched])
    assert torch.equal(flat_v[untouched], kept_v.view(640, -1)[untouched])


def test_a_position_past_the_table_or_a_slot_past_the_cache_is_refused_naming_why(kernel):
    _, q, k, v, (k_cache, v_cache), slots, positions = _step(2, 4, 2, 64, torch.float32, seed=8)
    table = _cos_sin_cache(2048, 64)
    with pytest.raises(ValueError, match="a position outside the RoPE table"):
        kernel.rotary_write_kv(torch.tensor([0, 2048]), q, k, v, table, k_cache, v_cache, slots)
    with pytest.raises(ValueError, match="a slot outside the cache"):
        kernel.rotary_write_kv(positions, q, k, v, table, k_cache, v_cache, torch.tensor([0, 640]))


def test_tensors_the_kernel_does_not_take_are_answered_none_and_cpu_ops_fall_back_to_torch(kernel):
    half = _randn(3, 64, dtype=torch.float16, seed=9)
    mixed_weight = _randn(64, dtype=torch.float32, seed=10)
    column = _randn(64, 6, dtype=torch.float32, seed=11).t()  # rows that are not dense
    assert kernel.rms_norm(half, half[0], 1e-5) is None
    assert kernel.rms_norm(half.to(torch.bfloat16), mixed_weight, 1e-5) is None
    assert kernel.silu_and_mul(half) is None
    assert kernel.silu_and_mul(column) is None
    _, q, k, v, (k_cache, v_cache), slots, positions = _step(2, 4, 2, 64, torch.float16, seed=12)
    assert kernel.rotary_write_kv(positions, q, k, v, _cos_sin_cache(2048, 64), k_cache, v_cache, slots) is None
    _, q, k, v, (k_cache, v_cache), slots, positions = _step(3, 4, 2, 64, torch.float32, seed=13)
    table = _cos_sin_cache(2048, 64)
    assert kernel.rotary_write_kv(positions, q, k, v, table, k_cache, v_cache, slots[:2]) is None  # a slot short
    assert kernel.rotary_write_kv(positions[:2], q, k, v, table, k_cache, v_cache, slots) is None
    assert kernel.rotary_write_kv(positions, q, k[:2], v[:2], table, k_cache, v_cache, slots) is None

    ops = get_ops("cpu", "cpu")
    assert isinstance(ops, CpuOps)
    assert torch.equal(ops.rms_norm(half, half[0], 1e-5), REFERENCE.rms_norm(half, half[0], 1e-5))
    assert torch.equal(ops.silu_and_mul(column), REFERENCE.silu_and_mul(column))


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 9),
    width=st.integers(1, 300),
    dtype=st.sampled_from(DTYPES),
    scale=st.sampled_from([1e-3, 1.0, 50.0]),
    seed=st.integers(0, 2**16),
)
def test_any_norm_and_activation_shape_matches_torch(rows, width, dtype, scale, seed):
    """Any row count and width (odd ones leave a vector's tail), on the native build through ``CpuOps``."""
    ops = get_ops("cpu", "cpu")
    x = _randn(rows, width, dtype=dtype, seed=seed, scale=scale)
    residual = _randn(rows, width, dtype=dtype, seed=seed + 1, scale=scale)
    weight = _randn(width, dtype=dtype, seed=seed + 2)
    out, total = ops.add_rms_norm(x, residual, weight, 1e-6)
    expected_out, expected_total = REFERENCE.add_rms_norm(x, residual, weight, 1e-6)
    assert torch.equal(total, expected_total)
    _close(out, expected_out)
    both = torch.cat((x, residual), dim=1)
    _close(ops.silu_and_mul(both), REFERENCE.silu_and_mul(both))
