"""LoRA's shrink and expand kernels (Triton, in the kernel lane) against the torch reference, each token through
its own slot.

Batches mix every slot with tokens of no adapter (-1) in an odd order and an odd count, so a slot's run spans
several ``BLOCK_M`` tiles and a tile straddles nothing it should not; ranks 8 and 16 (an adapter of rank 5 padded
to 8 with zeros, as the model's slots hold it); fused projections of one, two and three parts of uneven widths;
the shrink split over ``in``. Tokens without an adapter keep their exact bits. Then the model's ``LoRALinear``
on each backend, and inputs the kernels cannot serve refused naming the argument.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_lane import DTYPES, KERNEL_DEVICE, LANE, on_device

from shoal.engine.model.lora_linear import LoRABatch, LoRALinear, ProjectionShape
from shoal.kernels import TorchOps
from shoal.kernels.lora_metadata import LoRAMetadata

pytestmark = [*LANE, pytest.mark.timeout(300)]


def _randn(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    return on_device((torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 0.3).to(dtype))


def _mixed_slots(tokens: int, slots: int) -> list[int]:
    """Every slot and -1, interleaved unevenly: token i gets ``(i * 7) % (slots + 2) - 1``, clipped to slots."""
    return [min((i * 7) % (slots + 2) - 1, slots - 1) for i in range(tokens)]


def _weights(
    in_features: int, part_sizes: tuple[int, ...], slots: int, max_rank: int, rank: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``a`` ``[in, slots, parts * max_rank]`` and a block-diagonal ``b``, zeros past ``rank`` in each section."""
    parts = len(part_sizes)
    a = torch.zeros(in_features, slots, parts * max_rank)
    b = torch.zeros(slots, parts * max_rank, sum(part_sizes))
    start = 0
    for part, size in enumerate(part_sizes):
        cols = slice(part * max_rank, part * max_rank + rank)
        a[:, :, cols] = _randn(in_features, slots, rank, dtype=torch.float32, seed=part).cpu()
        b[:, cols, start : start + size] = _randn(slots, rank, size, dtype=torch.float32, seed=10 + part).cpu()
        start += size
    return on_device(a.to(dtype)), on_device(b.to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("tokens", "in_features", "part_sizes", "max_rank", "rank"),
    [
        (37, 72, (40, 24, 24), 16, 16),  # q, k, v of a GQA attention
        (37, 72, (40, 24, 24), 8, 5),  # a rank-5 adapter padded to 8
        (5, 130, (96, 96), 8, 8),  # gate, up: a decode step's few tokens
        (1, 40, (70,), 16, 16),
        (64, 24, (33,), 8, 8),  # an output no multiple of the column tile
    ],
)
def test_shrink_and_expand_match_the_reference(
    triton_ops, torch_ops, close, dtype, tokens, in_features, part_sizes, max_rank, rank
):
    slots = 3
    meta = LoRAMetadata.build(_mixed_slots(tokens, slots), slots, KERNEL_DEVICE)
    a, b = _weights(in_features, part_sizes, slots, max_rank, rank, dtype)
    x = _randn(tokens, in_features, dtype=dtype, seed=20)

    t = triton_ops.lora_shrink(x, a, meta)
    expected_t = torch_ops.lora_shrink(x, a, meta)
    assert t.dtype == torch.float32
    torch.testing.assert_close(t, expected_t, atol=1e-4 if dtype == torch.float32 else 2e-3, rtol=1e-3)

    y = _randn(tokens, sum(part_sizes), dtype=dtype, seed=21)
    expected_y = y.clone()
    torch_ops.lora_expand(expected_y, expected_t, b, meta, part_sizes)
    triton_ops.lora_expand(y, expected_t, b, meta, part_sizes)
    close(y, expected_y)


def test_tokens_without_an_adapter_keep_their_bits(triton_ops):
    meta = LoRAMetadata.build([-1, 0, -1, 1, 1, -1, 0], 2, KERNEL_DEVICE)
    a, b = _weights(32, (24, 8, 8), 2, 8, 8, torch.float16)
    x = _randn(7, 32, dtype=torch.float16, seed=1)
    y = _randn(7, 40, dtype=torch.float16, seed=2)
    before = y.clone()
    t = triton_ops.lora_shrink(x, a, meta)
    triton_ops.lora_expand(y, t, b, meta, (24, 8, 8))
    untouched = torch.tensor([0, 2, 5], device=KERNEL_DEVICE)
    assert torch.equal(t[untouched], torch.zeros_like(t[untouched]))
    assert torch.equal(y[untouched], before[untouched])
    assert not torch.equal(y[1], before[1])


def test_a_batch_with_no_adapter_changes_nothing(triton_ops):
    meta = LoRAMetadata.build([-1] * 5, 4, KERNEL_DEVICE)
    a, b = _weights(16, (16,), 4, 8, 8, torch.float32)
    y = _randn(5, 16, dtype=torch.float32, seed=3)
    before = y.clone()
    triton_ops.lora_expand(
        y, triton_ops.lora_shrink(_randn(5, 16, dtype=torch.float32, seed=4), a, meta), b, meta, (16,)
    )
    assert torch.equal(y, before)


@pytest.mark.parametrize("split_k", [2, 3])
def test_the_shrink_split_over_in_adds_up_to_the_whole(triton_ops, torch_ops, split_k):
    """On a GPU a decode step's shrink splits ``in`` so more programs run; the partial sums add atomically."""
    from shoal.kernels.triton.lora import lora_shrink

    meta = LoRAMetadata.build(_mixed_slots(9, 2), 2, KERNEL_DEVICE)
    a, _ = _weights(200, (16, 16), 2, 8, 8, torch.float32)
    x = _randn(9, 200, dtype=torch.float32, seed=5)
    torch.testing.assert_close(
        lora_shrink(x, a, meta, split_k), torch_ops.lora_shrink(x, a, meta), atol=1e-4, rtol=1e-4
    )


def test_a_strided_input_is_read_by_its_strides(triton_ops, torch_ops):
    """The model's projection inputs can be views (a slice of a wider activation)."""
    meta = LoRAMetadata.build(_mixed_slots(11, 2), 2, KERNEL_DEVICE)
    a, _ = _weights(48, (16,), 2, 8, 8, torch.float32)
    x = _randn(11, 80, dtype=torch.float32, seed=6)[:, 16:64]
    assert not x.is_contiguous()
    torch.testing.assert_close(
        triton_ops.lora_shrink(x, a, meta), torch_ops.lora_shrink(x, a, meta), atol=1e-4, rtol=1e-4
    )


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    token_slots=st.lists(st.integers(-1, 3), min_size=1, max_size=40),
    part_sizes=st.sampled_from([(8,), (24, 24), (32, 16, 16), (5, 3, 3)]),
    max_rank=st.sampled_from([8, 16]),
    in_features=st.integers(1, 90),
)
def test_any_slot_assignment_matches_the_reference(
    triton_ops, torch_ops, token_slots, part_sizes, max_rank, in_features
):
    meta = LoRAMetadata.build(token_slots, 4, KERNEL_DEVICE)
    a, b = _weights(in_features, part_sizes, 4, max_rank, max_rank, torch.float32)
    x = _randn(len(token_slots), in_features, dtype=torch.float32, seed=len(token_slots))
    y = _randn(len(token_slots), sum(part_sizes), dtype=torch.float32, seed=in_features)
    expected = y.clone()
    torch_ops.lora_expand(expected, torch_ops.lora_shrink(x, a, meta), b, meta, part_sizes)
    triton_ops.lora_expand(y, triton_ops.lora_shrink(x, a, meta), b, meta, part_sizes)
    torch.testing.assert_close(y, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("way", ["masked", "grouped"])
def test_lora_linear_on_triton_equals_the_torch_path(triton_ops, close, dtype, way):
    """The model's projection, q/k/v fused, three adapters (one of them on the whole fused projection, as Phi-3's
    name it) and base rows in one batch: the Triton kernels give the torch path's output, either way it runs. On a
    GPU host this is the bf16 parity of the LoRA linear compiled on CUDA."""
    from shoal.engine.lora.manager import LoRAManager

    shape = ProjectionShape(64, (64, 32, 32))
    base = torch.nn.Linear(64, 128, bias=False, device=KERNEL_DEVICE, dtype=dtype)
    with torch.no_grad():
        base.weight.copy_(_randn(128, 64, dtype=dtype, seed=7))
    adapters = [
        [(0, _randn(8, 64, dtype=torch.float32, seed=8), _randn(64, 8, dtype=torch.float32, seed=9))],
        [
            (p, _randn(4, 64, dtype=torch.float32, seed=p), _randn(n, 4, dtype=torch.float32, seed=p + 3))
            for p, n in enumerate((64, 32, 32))
        ],
        [(None, _randn(8, 64, dtype=torch.float32, seed=11), _randn(128, 8, dtype=torch.float32, seed=12))],
    ]
    row_slots = [(1, 5), (None, 3), (0, 1), (2, 9), (1, 1), (None, 1)]
    x = _randn(20, 64, dtype=dtype, seed=13)
    outputs = []
    for ops in (TorchOps(), triton_ops):
        batch = LoRABatch()
        layer = LoRALinear(base, shape, 3, 8, batch, ops, dtype, KERNEL_DEVICE)
        for slot, parts in enumerate(adapters):
            layer.set_slot(slot, parts)
        manager = LoRAManager({(0, "self_attn.qkv_proj"): layer}, batch, 3, 8, ops.lora_by_token)
        manager.masked_max_rows = 256 if way == "masked" else 0
        manager.prepare(row_slots, KERNEL_DEVICE)
        assert (batch.tokens is not None) == (ops is triton_ops)
        with torch.inference_mode():
            outputs.append(layer(x))
    close(outputs[1], outputs[0])


def test_metadata_groups_tokens_by_slot():
    meta = LoRAMetadata.build([2, -1, 0, 2, 2, -1, 0], 4)
    assert meta.sorted_tokens.tolist() == [2, 6, 0, 3, 4]
    assert meta.slot_starts.tolist() == [0, 2, 2, 5]
    assert meta.slot_counts.tolist() == [2, 0, 3, 0]
    assert meta.max_slot_tokens == 3
    with pytest.raises(ValueError, match=r"token_slots\[1\] = 4 is no slot of 4"):
        LoRAMetadata.build([0, 4], 4)


@pytest.mark.parametrize(
    ("op", "x", "a", "b", "part_sizes", "message"),
    [
        ("shrink", (4, 32), (24, 2, 16), None, None, "a takes 24 inputs per token, x has 32"),
        ("shrink", (5, 32), (32, 2, 16), None, None, "token_slots has 4 tokens, the input 5"),
        ("shrink", (4, 32), (32, 3, 16), None, None, r"the LoRA metadata has 2 slots, a.shape\[1\] 3"),
        ("expand", (4, 40), (4, 24), (2, 24, 40), (24, 8, 4), "must add up to y's 40"),
        ("expand", (4, 40), (4, 24), (2, 24, 40), (10, 10, 10, 10), "part_sizes must split the output in 1 to 3"),
        ("expand", (4, 40), (4, 16), (2, 24, 40), (40,), r"t \(4, 16\) must be \[4 tokens, 24 columns of b\]"),
    ],
)
def test_lora_kernels_reject_bad_input(triton_ops, op, x, a, b, part_sizes, message):
    meta = LoRAMetadata.build([0, -1, 1, 0], 2, KERNEL_DEVICE)
    zeros = lambda shape: torch.zeros(shape, device=KERNEL_DEVICE)  # noqa: E731
    with pytest.raises(ValueError, match=message):
        if op == "shrink":
            triton_ops.lora_shrink(zeros(x), zeros(a), meta)
        else:
            triton_ops.lora_expand(zeros(x), zeros(a), zeros(b), meta, part_sizes)
