"""Which layers are mixtures of experts, and the mixture settings we refuse, read from ``config.json``.

The sparse layers are checked against transformers' own choice (the block class each of its decoder layers
builds) for the same Qwen3-MoE config; every refusal names the field at fault.
"""

from __future__ import annotations

from typing import Any

import pytest
import transformers

from shoal.engine.model_config import ModelConfig, UnsupportedModelError

BASE: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 64,
}


def qwen3_moe(**fields: Any) -> dict[str, Any]:
    config = transformers.Qwen3MoeConfig(
        **BASE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, **fields
    )
    return config.to_dict() | {"architectures": ["Qwen3MoeForCausalLM"]}


@pytest.mark.parametrize(
    "fields",
    [{}, {"decoder_sparse_step": 2}, {"decoder_sparse_step": 3, "mlp_only_layers": [2]}, {"mlp_only_layers": [0, 5]}],
)
def test_sparse_layers_are_the_ones_transformers_builds(fields: dict[str, Any]) -> None:
    config = qwen3_moe(**fields)
    hf_model = transformers.Qwen3MoeModel(transformers.Qwen3MoeConfig(**config))
    expected = {i for i, layer in enumerate(hf_model.layers) if type(layer.mlp).__name__.endswith("SparseMoeBlock")}
    ours = ModelConfig.from_hf(config)
    assert ours.moe is not None and ours.moe.sparse_layers == expected
    assert [ours.is_sparse(i) for i in range(6)] == [i in expected for i in range(6)]
    assert (ours.moe.num_experts, ours.moe.experts_per_token, ours.moe.intermediate_size) == (4, 2, 16)
    assert ours.intermediate_size == 64 and ours.qk_norm  # the dense layers' size; Qwen3's q/k norms


def test_mixtral_is_sparse_everywhere_and_always_renormalises() -> None:
    config = transformers.MixtralConfig(**BASE, num_local_experts=8, num_experts_per_tok=2).to_dict()
    ours = ModelConfig.from_hf(config | {"architectures": ["MixtralForCausalLM"]})
    assert ours.moe is not None and ours.moe.sparse_layers == set(range(6)) and ours.moe.norm_topk_prob
    assert (ours.moe.num_experts, ours.moe.intermediate_size, ours.qk_norm) == (8, 64, False)


def test_qwen3_moe_spells_num_experts_either_way() -> None:
    """Hub configs say ``num_experts``; transformers' save_pretrained writes ``num_local_experts``."""
    config = qwen3_moe()
    assert "num_local_experts" in config
    hub = {k: v for k, v in config.items() if k != "num_local_experts"} | {"num_experts": 4}
    assert ModelConfig.from_hf(hub).moe == ModelConfig.from_hf(config).moe


def test_no_experts_is_a_dense_model() -> None:
    assert ModelConfig.from_hf(qwen3_moe() | {"num_local_experts": 0}).moe is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"shared_expert_intermediate_size": 64}, "shared_expert_intermediate_size"),
        ({"n_shared_experts": 1}, "n_shared_experts"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
        ({"num_experts_per_tok": 0}, "num_experts_per_tok"),
        ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
        ({"mlp_only_layers": [6]}, "mlp_only_layers"),
        ({"use_sliding_window": True, "sliding_window": 16}, "use_sliding_window"),
    ],
)
def test_unsupported_mixture_settings_are_named(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(UnsupportedModelError, match=field):
        ModelConfig.from_hf(qwen3_moe() | overrides)


def test_an_unsupported_architecture_lists_the_mixtures() -> None:
    with pytest.raises(UnsupportedModelError, match=r"DeepseekV3ForCausalLM.*MixtralForCausalLM.*Qwen3MoeForCausalLM"):
        ModelConfig.from_hf(qwen3_moe() | {"architectures": ["DeepseekV3ForCausalLM"]})


def gguf_metadata(arch: str, **fields: Any) -> dict[str, Any]:
    return {
        "general.architecture": arch,
        f"{arch}.block_count": 2,
        f"{arch}.embedding_length": 32,
        f"{arch}.feed_forward_length": 64,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.context_length": 128,
        f"{arch}.vocab_size": 64,
    } | {f"{arch}.{key}": value for key, value in fields.items()}


def test_a_llama_gguf_with_experts_is_mixtral_and_one_without_is_llama() -> None:
    mixtral = ModelConfig.from_gguf(gguf_metadata("llama", expert_count=8, expert_used_count=2), True)
    assert mixtral.architecture == "mixtral" and mixtral.moe is not None
    assert (mixtral.moe.num_experts, mixtral.moe.experts_per_token, mixtral.moe.intermediate_size) == (8, 2, 64)
    assert ModelConfig.from_gguf(gguf_metadata("llama"), True).moe is None


@pytest.mark.parametrize(
    ("arch", "fields", "named"),
    [
        ("qwen3moe", {"expert_used_count": 2, "expert_feed_forward_length": 16}, "qwen3moe.expert_count"),
        ("qwen3moe", {"expert_count": 4, "expert_feed_forward_length": 16}, "qwen3moe.expert_used_count"),
        ("qwen3moe", {"expert_count": 4, "expert_used_count": 2}, "qwen3moe.expert_feed_forward_length"),
        ("llama", {"expert_count": 4, "expert_used_count": 8}, "num_experts_per_tok=8"),
        ("llama", {"expert_count": 4, "expert_used_count": 2, "expert_shared_count": 1}, "llama.expert_shared_count"),
    ],
)
def test_gguf_mixture_metadata_we_cannot_run_is_named(arch: str, fields: dict[str, Any], named: str) -> None:
    with pytest.raises(UnsupportedModelError, match=named):
        ModelConfig.from_gguf(gguf_metadata(arch, **fields), True)
