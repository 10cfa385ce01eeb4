"""Dense projections on oneDNN-packed weights (fp32 on any CPU, bf16 where oneDNN computes it): the same products
as ``nn.functional.linear``, no extra memory.

In bf16 oneDNN gives bit-identical results for batches of several rows; a single row may sum in another order
(one bf16 step apart), so one-row products are compared within that. In fp32 torch's linear is MKL's sgemm and
the packed one oneDNN's, which sum in their own orders: compared within fp32 rounding of the sums.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from shoal.engine.loader import load as load_module
from shoal.engine.loader.load import load_model
from shoal.engine.loader.onednn_pack import pack_dense_projections
from shoal.engine.loader.quantize import pack_int8
from shoal.engine.model import allocate_kv_cache
from shoal.engine.model import packed_linear as packed_module
from shoal.engine.model.packed_linear import PackedLinear, onednn_bf16, onednn_packs
from shoal.engine.model.quantized_linear import QuantizedLinear
from shoal.kernels import AttentionMetadata, TorchOps
from shoal.model_registry import resolve_model

needs_bf16_path = pytest.mark.skipif(
    not onednn_bf16(), reason="this CPU's oneDNN has no bf16 path (AVX-512 BW/VL/DQ or AVX-NE-CONVERT): nothing packs"
)


@needs_bf16_path
@pytest.mark.parametrize("rows", [1, 7, 64, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_linear_computes_what_linear_does(rows: int, bias: bool) -> None:
    torch.manual_seed(rows)
    dense = nn.Linear(96, 160, bias=bias).to(torch.bfloat16)
    x = torch.randn(rows, 96, dtype=torch.bfloat16)
    packed = PackedLinear(dense)
    assert not hasattr(packed, "weight")  # the plain weight is not kept
    with torch.inference_mode():
        expected, out = dense(x), packed(x)
    if rows > 1:
        assert torch.equal(out, expected)
    else:
        torch.testing.assert_close(out, expected, atol=0, rtol=2**-7)


@pytest.mark.parametrize("rows", [1, 9, 64, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_fp32_linear_computes_what_linear_does(rows: int, bias: bool) -> None:
    torch.manual_seed(rows)
    dense = nn.Linear(576, 320, bias=bias)
    x = torch.randn(rows, 576)
    packed = PackedLinear(dense)
    assert not hasattr(packed, "weight")
    with torch.inference_mode():
        expected, out = dense(x), packed(x)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-5)  # outputs ~1: sums of 576 in another order


def test_fp32_on_any_cpu_and_bf16_where_onednn_computes_it_are_packed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packed_module, "onednn_bf16", lambda: True)
    assert onednn_packs(torch.bfloat16, "cpu") and onednn_packs(torch.float32, "cpu")
    assert not onednn_packs(torch.bfloat16, "cuda") and not onednn_packs(torch.float32, "cuda")
    assert not onednn_packs(torch.float16, "cpu")
    monkeypatch.setattr(packed_module, "onednn_bf16", lambda: False)  # an AVX2-only CPU: oneDNN refuses bf16
    assert not onednn_packs(torch.bfloat16, "cpu") and onednn_packs(torch.float32, "cpu")
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)  # a torch built without oneDNN
    assert not onednn_packs(torch.float32, "cpu")


def test_a_bf16_model_on_a_cpu_without_onednn_bf16_loads_unpacked(tiny_gqa_llama_dir: Path) -> None:
    """On an AVX2-only CPU the reorder raises; ``--dtype bfloat16`` there must load (emulated, slower), not crash."""
    model = load_model(resolve_model(str(tiny_gqa_llama_dir)), torch.bfloat16, TorchOps())
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    assert bool(packed) == onednn_bf16()
    prompt = [3, 9, 27, 81, 5]
    assert torch.isfinite(logits(model, prompt)).all()


def logits(model: nn.Module, prompt: list[int]) -> torch.Tensor:
    """A prompt's prefill (many rows) then one decode (one row), through the model's own forward."""
    config = model.config
    kv = allocate_kv_cache(config, num_blocks=2, block_size=16, dtype=model.embed_tokens.weight.dtype)
    n = len(prompt)
    with torch.inference_mode():
        meta = AttentionMetadata.build([n - 1], [n - 1], [[0, 1]], 16)
        first = model(torch.tensor(prompt[:-1]), torch.arange(n - 1), kv, meta, torch.tensor([n - 2]))
        meta = AttentionMetadata.build([1], [n], [[0, 1]], 16)
        return torch.cat([first, model(torch.tensor(prompt[-1:]), torch.tensor([n - 1]), kv, meta, torch.tensor([0]))])


@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_bf16_path)], ids=["fp32", "bf16"]
)
def test_a_loaded_model_packs_every_projection_and_answers_as_before(
    tiny_gqa_llama_dir: Path, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype
) -> None:
    source = resolve_model(str(tiny_gqa_llama_dir))
    packed = load_model(source, dtype, TorchOps())
    monkeypatch.setattr(load_module, "onednn_packs", lambda dtype, device: False)
    plain = load_model(source, dtype, TorchOps())
    projections = [m for m in packed.modules() if isinstance(m, PackedLinear)]
    assert len(projections) == 4 * packed.config.num_layers + 1  # qkv, o, gate_up, down per layer; LM head
    assert not any(type(m) is nn.Linear for m in packed.modules())
    # the LM head is tied to the embedding: its weight is the embedding's, kept; no other plain weight is
    assert packed.lm_head.weight is packed.embed_tokens.weight
    assert not hasattr(packed.layers[0].mlp.down_proj, "weight")
    prompt = list(range(3, 20))
    atol, rtol = (0.05, 0.02) if dtype == torch.bfloat16 else (1e-4, 1e-4)
    torch.testing.assert_close(logits(packed, prompt), logits(plain, prompt), atol=atol, rtol=rtol)


@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_bf16_path)], ids=["fp32", "bf16"]
)
def test_a_quantized_projection_packs_the_dense_weight_its_large_batches_use(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    dense = nn.Linear(64, 32, bias=False).to(dtype)
    layer = QuantizedLinear(dense, "int8", *pack_int8(dense.weight, dtype), max_rows=2)
    model = nn.Sequential(layer)
    large = torch.randn(9, 64, dtype=dtype)
    with torch.inference_mode():
        expected = dense(large)
        assert pack_dense_projections(model) == ["0"]
        assert layer.weight is None  # nothing else held it: dropped once packed
        if dtype == torch.bfloat16:
            assert torch.equal(layer(large), expected)
        else:
            torch.testing.assert_close(layer(large), expected, atol=1e-5, rtol=1e-5)
