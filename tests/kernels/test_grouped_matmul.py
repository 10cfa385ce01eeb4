"""The mixture of experts' grouped matmul (Triton, in the kernel lane) against the torch reference's matmul per expert.

Runs of rows that fill several ``BLOCK_M`` tiles and runs of one row, experts nobody chose (a count of 0, first,
last and between), output and input sizes that are no multiple of the kernel's blocks; then a whole MoE block
on each backend, and inputs the kernel cannot serve refused naming the argument.
"""

from __future__ import annotations

import pytest
import torch
from kernel_lane import DTYPES, KERNEL_DEVICE, LANE, interpreter_only, on_device

from shoal.engine.model.moe import SparseMoE
from shoal.engine.model_config import ModelConfig, MoeConfig

pytestmark = LANE


def _randn(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return on_device(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("counts", "n", "k"),
    [
        ([0, 3, 37, 0, 1, 16], 72, 80),  # 37 rows: three tiles, the last partial
        ([5, 0, 0, 2], 64, 64),
        ([1], 130, 24),
        ([0, 0, 17, 0], 16, 200),
    ],
)
def test_grouped_matmul_matches_a_matmul_per_expert(triton_ops, torch_ops, close, dtype, counts, n, k):
    rows = _randn(sum(counts), k, dtype=dtype) * 0.3
    weight = _randn(len(counts), n, k, dtype=dtype, seed=1) * 0.3
    close(triton_ops.grouped_matmul(rows, weight, counts), torch_ops.grouped_matmul(rows, weight, counts))


@interpreter_only
def test_bf16_operands_go_through_fp32_under_the_interpreter(triton_ops, torch_ops):
    """The interpreter would multiply bf16 as raw bits; upcast, the products equal the reference's within the
    last bf16 bit (the interpreter truncates the final fp32 -> bf16 cast where torch rounds)."""
    counts = [3, 0, 20]
    rows = _randn(23, 96, dtype=torch.bfloat16) * 0.3
    weight = _randn(3, 40, 96, dtype=torch.bfloat16, seed=1) * 0.3
    got, expected = triton_ops.grouped_matmul(rows, weight, counts), torch_ops.grouped_matmul(rows, weight, counts)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected.float(), atol=1e-2, rtol=2**-7)


def test_a_moe_block_on_triton_equals_the_torch_one(triton_ops, torch_ops):
    config = ModelConfig(
        architecture="qwen3_moe",
        hidden_size=64,
        intermediate_size=96,
        num_layers=1,
        num_heads=2,
        num_kv_heads=2,
        head_dim=32,
        vocab_size=16,
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        max_position_embeddings=32,
        moe=MoeConfig(6, 2, 40, False, frozenset({0})),
    )
    on_torch, on_triton = SparseMoE(config, torch_ops), SparseMoE(config, triton_ops)
    with torch.no_grad():
        for param in on_torch.parameters():
            param.copy_(_randn(*param.shape, dtype=torch.float32, seed=param.numel()) * 0.3)
    on_triton.load_state_dict(on_torch.state_dict())
    on_torch, on_triton = on_torch.to(KERNEL_DEVICE), on_triton.to(KERNEL_DEVICE)
    hidden = _randn(23, 64, dtype=torch.float32, seed=5)
    with torch.inference_mode():
        expected, got = on_torch.forward(hidden), on_triton.forward(hidden)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("rows", "weight", "counts", "message"),
    [
        ((4, 32), (2, 16, 32), [1, 2], "counts must give each of the 2 experts its number of rows, summing to 4"),
        ((4, 32), (2, 16, 32), [4], "counts must give each of the 2 experts"),
        ((4, 32), (2, 16, 24), [2, 2], "weight takes 24 inputs per row, rows have 32"),
        ((4, 32), (16, 32), [4], r"weight must be \[experts, out, in\]"),
    ],
)
def test_grouped_matmul_rejects_bad_input(triton_ops, rows, weight, counts, message):
    with pytest.raises(ValueError, match=message):
        triton_ops.grouped_matmul(
            torch.zeros(rows, device=KERNEL_DEVICE), torch.zeros(weight, device=KERNEL_DEVICE), counts
        )
