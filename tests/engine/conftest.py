"""Engine fixtures: tiny random checkpoints (session-scoped, built once) and the bundled SmolLM2 model."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_checkpoints import build_checkpoint, build_shared_checkpoint

from shoal.model_registry import ModelSource, resolve_model

SMOLLM2 = "smollm2-135m"


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama with multi-head attention (as many KV heads as query heads), untied LM head."""
    return build_checkpoint(tmp_path_factory.mktemp("tiny-llama"), "llama", seed=1)


@pytest.fixture(scope="session")
def tiny_gqa_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama with grouped-query attention (4 query heads share 2 KV heads) and tied embeddings."""
    return build_shared_checkpoint(tmp_path_factory.mktemp("tiny-gqa-llama"), "gqa-llama")


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen2: biases on q/k/v, GQA."""
    return build_checkpoint(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2", seed=3, num_key_value_heads=2)


@pytest.fixture(scope="session")
def tiny_mistral_window_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mistral v0.1-style: every query sees only its last 6 positions (the tests' sequences are longer)."""
    return build_shared_checkpoint(tmp_path_factory.mktemp("tiny-mistral-window"), "mistral-window")


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3: RMSNorm of each query and key head before RoPE, an explicit head_dim, GQA, tied embeddings."""
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-qwen3"),
        "qwen3",
        seed=6,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
    )


@pytest.fixture(scope="session")
def tiny_phi3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Phi-3/Phi-4-mini: fused qkv and gate_up projections in the checkpoint, RoPE on 3/4 of each head, GQA."""
    from tiny_checkpoints import EOS, train_tokenizer

    eos = train_tokenizer(vocab_size=384).token_to_id(EOS)
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-phi3"),
        "phi3",
        seed=7,
        num_key_value_heads=2,
        partial_rotary_factor=0.75,
        sliding_window=None,
        pad_token_id=eos,
    )


@pytest.fixture(scope="session")
def tiny_qwen2_window_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen2 with use_sliding_window: a 5-token window on the layers from max_window_layers=1 on, the first
    full."""
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-qwen2-window"),
        "qwen2",
        seed=11,
        num_hidden_layers=3,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=5,
        max_window_layers=1,
    )


@pytest.fixture(scope="session")
def tiny_gemma2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gemma 2: a 6-token window on every other layer of 4 (the tests' sequences are longer), attention scores
    soft-capped at 2 and logits at 5 (low enough to bend them), query_pre_attn_scalar unlike head_dim, GeGLU,
    four norms a layer, scaled embeddings, GQA, tied embeddings."""
    return build_shared_checkpoint(tmp_path_factory.mktemp("tiny-gemma2"), "gemma2")


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gemma 3 (text): a 5-token window on all but every third layer of 5, the sliding layers' own RoPE base
    (10,000 against the global layers' 1,000,000, those linearly scaled by 8 as Gemma 3 4B's are), q/k norms,
    GeGLU, four norms a layer, scaled embeddings, GQA, tied embeddings."""
    rope = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    }
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-gemma3"),
        "gemma3",
        seed=10,
        num_hidden_layers=5,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=5,
        sliding_window_pattern=3,
        rope_parameters=rope,
    )


@pytest.fixture(scope="session")
def tiny_llama3_scaled_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama 3.1-style RoPE scaling, with a short original context so that every frequency band is exercised."""
    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    }
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-llama3"), "llama", seed=4, num_key_value_heads=2, rope_parameters=rope
    )


@pytest.fixture(scope="session")
def tiny_mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mistral-style (no sliding window), GQA."""
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-mistral"), "mistral", seed=5, num_key_value_heads=1, sliding_window=None
    )


@pytest.fixture(scope="session")
def tiny_mixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mixtral: every layer's MLP a mixture of 4 experts, 2 per token (renormalised), GQA."""
    return build_shared_checkpoint(tmp_path_factory.mktemp("tiny-mixtral"), "mixtral")


@pytest.fixture(scope="session")
def tiny_mixtral_window_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mixtral with a sliding window of 6 positions (Mixtral's config allows one, as Mistral v0.1's)."""
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-mixtral-window"), "mixtral", seed=12, num_key_value_heads=2, sliding_window=6
    )


@pytest.fixture(scope="session")
def tiny_qwen3_moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-MoE: 6 experts, 2 per token, their probabilities not renormalised (norm_topk_prob false); layer 1 of
    3 a dense MLP (mlp_only_layers) of another size than the experts'; q/k norms, head_dim 32, GQA."""
    return build_checkpoint(
        tmp_path_factory.mktemp("tiny-qwen3-moe"),
        "qwen3_moe",
        seed=10,
        num_hidden_layers=3,
        mlp_only_layers=[1],
        num_key_value_heads=2,
        head_dim=32,
    )


@pytest.fixture(scope="session")
def smollm2_source() -> ModelSource:
    """The bundled SmolLM2-135M-Instruct GGUF."""
    return resolve_model(SMOLLM2)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_source: ModelSource):
    """Our tokenizer rebuilt from the GGUF metadata."""
    from shoal.tokenizer import Tokenizer

    return Tokenizer.from_source(smollm2_source)


@pytest.fixture(scope="session")
def smollm2_model(smollm2_source: ModelSource):
    """Our fp32 SmolLM2 on the torch path (about 5 s to dequantize and load)."""
    import torch

    from shoal.engine.loader import load_model
    from shoal.kernels import TorchOps

    return load_model(smollm2_source, torch.float32, TorchOps())


@pytest.fixture(scope="session")
def smollm2_hf_model(smollm2_source: ModelSource):
    """transformers' own GGUF loader on the same file, in fp32: the reference (about 15 s)."""
    import torch
    import transformers

    path = smollm2_source.path
    return transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
