"""A mixture of experts loads from every format and in every dtype path the engine uses, strictly.

Hugging Face checkpoints store each expert's projections apart; GGUF files stack them per layer
(``ffn_{gate,up,down}_exps``, Mixtral as a ``llama`` file, Qwen3-MoE as ``qwen3moe``); both end in the model's
stacked parameters. A GGUF written from a checkpoint gives that checkpoint's exact logits; bf16 (oneDNN-packed
router) and quantized loads stay close to fp32; an expert tensor missing, extra or in a dense layer is named.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize, quantize
from safetensors.torch import load_file, save_file
from tiny_checkpoints import build_checkpoint, write_llama_gguf

from shoal.engine.loader import WeightsError, load_model
from shoal.engine.loader import load as load_module
from shoal.engine.model import CausalLM, allocate_kv_cache
from shoal.engine.model.moe import SparseMoE
from shoal.engine.model.packed_linear import PackedLinear, onednn_packs
from shoal.engine.model.quantized_linear import QuantizedLinear
from shoal.kernels import AttentionMetadata, TorchOps
from shoal.model_registry import resolve_model


def load(path: Path, dtype: torch.dtype = torch.float32, quantization: str = "none") -> CausalLM:
    return load_model(resolve_model(str(path)), dtype, TorchOps(), quantization=quantization)


def prefill_then_decode(model: CausalLM, prompt: list[int]) -> torch.Tensor:
    """The logits of a prefill of all but the last token (many rows), then of a decode of it (one row)."""
    dtype = model.embed_tokens.weight.dtype
    kv = allocate_kv_cache(model.config, num_blocks=4, block_size=16, dtype=dtype)
    n = len(prompt)
    with torch.inference_mode():
        meta = AttentionMetadata.build([n - 1], [n - 1], [[3, 1, 0, 2]], 16)
        first = model(torch.tensor(prompt[:-1]), torch.arange(n - 1), kv, meta, torch.arange(n - 1))
        meta = AttentionMetadata.build([1], [n], [[3, 1, 0, 2]], 16)
        last = model(torch.tensor(prompt[-1:]), torch.tensor([n - 1]), kv, meta, torch.tensor([0]))
    return torch.cat([first, last]).float()


PROMPT = [5, 9, 40, 7, 100, 3, 17, 250, 31, 8, 64, 12, 90, 2, 77, 150, 33, 21, 60, 61]


@pytest.fixture(scope="module")
def tiny_qwen3_moe_normalized_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-MoE as llama.cpp runs it: every layer sparse, the chosen experts' probabilities renormalised."""
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-qwen3-moe-norm"),
        "qwen3_moe",
        seed=11,
        num_key_value_heads=2,
        head_dim=32,
        norm_topk_prob=True,
    )


def test_a_mixtral_gguf_gives_the_checkpoints_exact_logits(tiny_mixtral_dir: Path, tmp_path: Path) -> None:
    """Written as llama.cpp does: a ``llama`` file with llama.expert_count, Q/K permuted, experts stacked."""
    path = write_llama_gguf(tiny_mixtral_dir, tmp_path / "mixtral.gguf")
    model = load(path)
    assert model.config.architecture == "mixtral" and model.config.moe is not None
    assert (model.config.moe.num_experts, model.config.moe.experts_per_token) == (4, 2)
    expected = prefill_then_decode(load(tiny_mixtral_dir), PROMPT)
    torch.testing.assert_close(prefill_then_decode(model, PROMPT), expected, atol=0, rtol=0)


def test_a_qwen3_moe_gguf_gives_the_checkpoints_exact_logits(
    tiny_qwen3_moe_normalized_dir: Path, tmp_path: Path
) -> None:
    path = write_llama_gguf(tiny_qwen3_moe_normalized_dir, tmp_path / "qwen3moe.gguf", architecture="qwen3moe")
    model = load(path)
    assert model.config.architecture == "qwen3_moe" and model.config.moe is not None
    assert model.config.moe.intermediate_size == 48 and model.config.moe.norm_topk_prob
    expected = prefill_then_decode(load(tiny_qwen3_moe_normalized_dir), PROMPT)
    torch.testing.assert_close(prefill_then_decode(model, PROMPT), expected, atol=0, rtol=0)


def test_a_q4_0_gguf_dequantizes_each_expert_in_its_place(
    tiny_mixtral_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each expert's gate, up and down rows are its own Q4_0 blocks dequantized (2-D, one expert at a time): read
    from the stacks as loaded, before a CPU's oneDNN packing replaces them."""
    monkeypatch.setattr(load_module, "onednn_packs", lambda dtype, device: False)
    path = write_llama_gguf(tiny_mixtral_dir, tmp_path / "mixtral-q4.gguf", quantize="Q4_0")
    moe = load(path).layers[1].mlp
    assert isinstance(moe, SparseMoE)
    original = load_file(tiny_mixtral_dir / "model.safetensors")
    inter = moe.experts_down.shape[2]
    qtype = gguf.GGMLQuantizationType.Q4_0
    for expert in range(4):
        for hf, ours in (
            ("w1", moe.experts_gate_up[expert, :inter]),
            ("w3", moe.experts_gate_up[expert, inter:]),
            ("w2", moe.experts_down[expert]),
        ):
            weight = original[f"model.layers.1.block_sparse_moe.experts.{expert}.{hf}.weight"].numpy()
            want = dequantize(quantize(weight.astype(np.float32), qtype), qtype)
            assert torch.equal(ours, torch.from_numpy(np.asarray(want, dtype=np.float32))), (expert, hf)


def test_bf16_stays_close_to_fp32_and_packs_the_router_and_every_expert(
    tiny_mixtral_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = prefill_then_decode(load(tiny_mixtral_dir), PROMPT)
    model = load(tiny_mixtral_dir, torch.bfloat16)
    got = prefill_then_decode(model, PROMPT)
    assert (got - reference).abs().max() <= 0.05 * reference.abs().max()
    assert (got.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.9
    if not onednn_packs(torch.bfloat16, "cpu"):
        return
    moe = model.layers[0].mlp
    assert isinstance(moe, SparseMoE) and isinstance(moe.router, PackedLinear) and moe.packed is not None
    assert not hasattr(moe, "experts_gate_up")  # the plain stacks dropped once packed
    monkeypatch.setattr(load_module, "onednn_packs", lambda dtype, device: False)
    plain = load(tiny_mixtral_dir, torch.bfloat16)
    assert plain.layers[0].mlp.experts_gate_up.dtype == torch.bfloat16
    torch.testing.assert_close(got, prefill_then_decode(plain, PROMPT), atol=0.05, rtol=0.02)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantization_leaves_the_experts_dense_and_says_so(
    tiny_mixtral_dir: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    reference = prefill_then_decode(load(tiny_mixtral_dir, torch.bfloat16), PROMPT)
    with caplog.at_level(logging.WARNING, logger="shoal.engine.loader.load"):
        model = load(tiny_mixtral_dir, torch.bfloat16, quantization=kind)
    assert f"quantization={kind}" in caplog.text and "4 experts of each sparse layer stay bfloat16" in caplog.text
    quantized = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, QuantizedLinear)}
    assert quantized == {"qkv_proj", "o_proj", "lm_head"}
    got = prefill_then_decode(model, PROMPT)
    assert (got - reference).abs().max() <= 0.25 * reference.abs().max()  # the decode row ran int4/int8 attention


def copy_checkpoint(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / "ckpt"))


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (
            lambda t: t.pop("model.layers.1.block_sparse_moe.experts.2.w3.weight"),
            r"expert\(s\) \[2\] of 'layers.1.mlp.experts_gate_up'",
        ),
        (
            lambda t: t.update({"model.layers.0.block_sparse_moe.experts.4.w2.weight": torch.zeros(64, 128)}),
            "model.layers.0.block_sparse_moe.experts.4.w2.weight",
        ),
        (lambda t: t.pop("model.layers.0.block_sparse_moe.gate.weight"), "layers.0.mlp.router.weight"),
        (
            lambda t: t.update({"model.layers.0.block_sparse_moe.experts.1.w2.weight": torch.zeros(64, 127)}),
            "layers.0.mlp.experts_down",
        ),
    ],
    ids=["missing-expert", "expert-beyond-num_local_experts", "missing-router", "misshapen-expert"],
)
def test_bad_expert_tensors_are_named(edit, named: str, tiny_mixtral_dir: Path, tmp_path: Path) -> None:
    directory = copy_checkpoint(tiny_mixtral_dir, tmp_path)
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(WeightsError, match=named):
        load(directory)


def test_an_expert_in_a_dense_layer_is_named(tiny_qwen3_moe_dir: Path, tmp_path: Path) -> None:
    """Layer 1 of the tiny Qwen3-MoE is dense (mlp_only_layers): an expert there has no place."""
    directory = copy_checkpoint(tiny_qwen3_moe_dir, tmp_path)
    tensors = load_file(directory / "model.safetensors")
    tensors["model.layers.1.mlp.experts.0.up_proj.weight"] = torch.zeros(48, 64)
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(WeightsError, match=r"model.layers.1.mlp.experts.0.up_proj.weight.*qwen3_moe"):
        load(directory)
