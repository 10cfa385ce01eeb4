"""A GGUF file loads into the same model and tokenizer as the Hugging Face checkpoint it was converted from."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from sentencepiece_reference import SentencePieceReference
from support.devices import TEST_DEVICE
from tiny_checkpoints import build_checkpoint, train_sentencepiece, write_gemma_gguf, write_llama_gguf

from shoal.engine import LLM, SamplingParams
from shoal.engine.loader import load_config, load_model
from shoal.engine.model import Model, allocate_kv_cache
from shoal.engine.model.quantized_linear import QuantizedLinear
from shoal.engine.model_config import ModelConfig, UnsupportedModelError
from shoal.gguf_metadata import read_gguf_metadata
from shoal.kernels import AttentionMetadata, TorchOps
from shoal.model_registry import resolve_model
from shoal.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tiny_gguf(tiny_gqa_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama_gguf(tiny_gqa_llama_dir, tmp_path_factory.mktemp("gguf") / "tiny-gqa.gguf")


def prefill_logits(source_path: Path) -> torch.Tensor:
    model = load_model(resolve_model(str(source_path)), torch.float32, TorchOps())
    ids = torch.arange(3, 40)
    kv = allocate_kv_cache(model.config, num_blocks=3, block_size=16, dtype=torch.float32)
    meta = AttentionMetadata.build([len(ids)], [len(ids)], [[2, 0, 1]], block_size=16)
    with torch.inference_mode():
        return model(ids, torch.arange(len(ids)), kv, meta, torch.arange(len(ids)))


def test_gguf_weights_equal_the_original_checkpoint(tiny_gguf: Path, tiny_gqa_llama_dir: Path) -> None:
    """Q/K un-permuted with the right head counts (GQA), tied LM head (the file has no output.weight)."""
    torch.testing.assert_close(prefill_logits(tiny_gguf), prefill_logits(tiny_gqa_llama_dir), atol=0, rtol=0)


def test_gguf_tokenizer_equals_the_original_tokenizer(tiny_gguf: Path, tiny_gqa_llama_dir: Path) -> None:
    from_gguf, from_dir = Tokenizer.from_gguf(tiny_gguf), Tokenizer.from_hf_dir(tiny_gqa_llama_dir)
    text = "<|im_start|>The capital of France is Paris 🐟 東京\n  x"
    for special in (True, False):
        assert from_gguf.encode(text, add_special_tokens=special) == from_dir.encode(text, add_special_tokens=special)
    assert from_gguf.encode("hi")[0] == from_gguf.bos_token_id  # tokenizer.ggml.add_bos_token
    assert from_gguf.eos_token_ids == from_dir.eos_token_ids
    messages = [{"role": "user", "content": "hello"}]
    assert from_gguf.apply_chat_template(messages) == from_dir.apply_chat_template(messages)


def test_a_llama_3_1_gguf_rotates_by_its_rope_freqs_as_the_original_scales(
    tiny_llama3_scaled_dir: Path, tmp_path: Path
) -> None:
    """llama.cpp stores Llama 3.1's RoPE scaling as per-frequency divisors (``rope_freqs.weight``), not as the
    scaling's parameters: read as such, the GGUF's logits are the Hugging Face checkpoint's, whose every
    frequency band the tiny config's short original context exercises."""
    gguf_path = write_llama_gguf(tiny_llama3_scaled_dir, tmp_path / "llama3.gguf")
    model = load_model(resolve_model(str(gguf_path)), torch.float32, TorchOps())
    assert model.config.rope_freq_factors is not None and max(model.config.rope_freq_factors) == 8.0
    torch.testing.assert_close(prefill_logits(gguf_path), prefill_logits(tiny_llama3_scaled_dir), atol=1e-4, rtol=0)
    unscaled = write_llama_gguf(tiny_llama3_scaled_dir, tmp_path / "unscaled.gguf", rope_freqs=False)
    assert not torch.allclose(prefill_logits(unscaled), prefill_logits(tiny_llama3_scaled_dir), atol=1e-2)


def test_a_qwen3_gguf_loads_its_query_and_key_norms(tiny_qwen3_dir: Path, tmp_path: Path) -> None:
    """Qwen3 as llama.cpp writes it: q/k norms as attn_q_norm / attn_k_norm, an explicit head size (key_length),
    Q and K unpermuted; the logits are the Hugging Face checkpoint's."""
    gguf_path = write_llama_gguf(tiny_qwen3_dir, tmp_path / "qwen3.gguf", architecture="qwen3")
    torch.testing.assert_close(prefill_logits(gguf_path), prefill_logits(tiny_qwen3_dir), atol=0, rtol=0)


@pytest.fixture(scope="module")
def gemma_for_gguf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny Gemmas whose every setting a GGUF carries or llama.cpp assumes: query_pre_attn_scalar = head_dim,
    Gemma 2's window on every other layer (with soft caps), Gemma 3's on all but every sixth (7 layers), its
    local RoPE base 10,000 and linearly scaled global layers."""
    common = dict(num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16)
    settings: dict[str, Any]
    if request.param == "gemma2":
        settings = dict(num_hidden_layers=4, sliding_window=6, attn_logit_softcapping=2.0, final_logit_softcapping=5.0)
    else:
        rope = {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        }
        settings = dict(num_hidden_layers=7, sliding_window=5, sliding_window_pattern=6, rope_parameters=rope)
    directory = tmp_path_factory.mktemp(f"{request.param}-for-gguf")
    return build_checkpoint(directory, request.param, seed=12, **common, **settings)


@pytest.mark.parametrize("gemma_for_gguf", ["gemma2", "gemma3"], indirect=True)
def test_a_gemma_gguf_gives_the_original_checkpoints_logits(gemma_for_gguf: Path, tmp_path: Path) -> None:
    """Written as llama.cpp's converter writes it (norm weights with Gemma's 1 added, Gemma's norm names, no
    layer pattern or query_pre_attn_scalar), the file reads back as the checkpoint's model: the same per-layer
    windows, scale, soft caps and RoPE, and the same logits over a prompt longer than the windows."""
    gguf_path = write_gemma_gguf(gemma_for_gguf, tmp_path / "gemma.gguf")
    from_gguf = load_model(resolve_model(str(gguf_path)), torch.float32, TorchOps()).config
    from_dir = load_model(resolve_model(str(gemma_for_gguf)), torch.float32, TorchOps()).config
    for field in (
        "architecture",
        "sliding_window",
        "sliding_layers",
        "attention_scale",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "rope_theta",
        "rope_local_theta",
        "rope_scaling",
        "qk_norm",
        "hidden_act",
        "tie_word_embeddings",
    ):
        assert getattr(from_gguf, field) == getattr(from_dir, field), field
    torch.testing.assert_close(prefill_logits(gguf_path), prefill_logits(gemma_for_gguf), atol=1e-4, rtol=0)
    tokenizer = Tokenizer.from_gguf(gguf_path)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]).endswith("<start_of_turn>model\n")


PAD = 0  # <|endoftext|>, the tiny vocabulary's first token (Phi3Config's default pad id is past its end)


@pytest.fixture(scope="module", params=["phi3-mini", "phi4-mini"])
def phi3_for_gguf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny Phi-3s as llama.cpp's converter can write them: Phi-3-mini's shape (a 6-token window on every layer,
    an LM head of its own) and Phi-4-mini's (no window, the head tied to the embedding), each with RoPE on part of
    every head and GQA."""
    settings: dict[str, Any]
    if request.param == "phi3-mini":
        settings = dict(partial_rotary_factor=0.5, sliding_window=6)
    else:
        settings = dict(partial_rotary_factor=0.75, sliding_window=None, tie_word_embeddings=True)
    directory = tmp_path_factory.mktemp(f"{request.param}-for-gguf")
    return build_checkpoint(directory, "phi3", seed=13, num_key_value_heads=2, pad_token_id=PAD, **settings)


def test_a_phi3_gguf_gives_the_original_checkpoints_logits(phi3_for_gguf: Path, tmp_path: Path) -> None:
    """Written as llama.cpp's converter writes Phi-3 (``Phi3MiniModel``: Q, K, V fused and unpermuted in
    ``attn_qkv``, gate and up fused in ``ffn_up``, the rotary features per head in ``rope.dimension_count``, the
    window in ``attention.sliding_window``, 0 for none), the file reads back as the checkpoint's model: the same
    partial RoPE, window and head, and the same logits over a prompt longer than the window."""
    gguf_path = write_llama_gguf(phi3_for_gguf, tmp_path / "phi3.gguf", architecture="phi3")
    from_gguf = load_model(resolve_model(str(gguf_path)), torch.float32, TorchOps()).config
    from_dir = load_model(resolve_model(str(phi3_for_gguf)), torch.float32, TorchOps()).config
    for field in (
        "architecture",
        "hidden_size",
        "intermediate_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "partial_rotary_factor",
        "rotary_dim",
        "sliding_window",
        "sliding_layers",
        "window_of_every_layer",
        "max_position_embeddings",
        "rope_theta",
        "rope_scaling",
        "rms_norm_eps",
        "attention_bias",
        "hidden_act",
        "tie_word_embeddings",
    ):
        assert getattr(from_gguf, field) == pytest.approx(getattr(from_dir, field)), field
    assert from_gguf.rotary_dim < from_gguf.head_dim
    torch.testing.assert_close(prefill_logits(gguf_path), prefill_logits(phi3_for_gguf), atol=1e-4, rtol=0)


def test_a_q4_0_phi3_gguf_serves_int4_from_its_fused_projections(phi3_for_gguf: Path, tmp_path: Path) -> None:
    """Phi-3's fused ``attn_qkv`` and ``ffn_up`` count as projections: stored as Q4_0 they are served from the
    file's own codes, like the other two, and the greedy token is the dequantized model's."""
    gguf_path = write_llama_gguf(phi3_for_gguf, tmp_path / "phi3-q4.gguf", architecture="phi3", quantize="Q4_0")
    source = resolve_model(str(gguf_path))
    reference = load_model(source, torch.float32, TorchOps())
    quantized = load_model(source, torch.float32, TorchOps(), quantization="int4")
    names = {name for name, m in quantized.named_modules() if isinstance(m, QuantizedLinear)}
    assert {n.rsplit(".", 1)[1] for n in names} == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    assert len(names) == 4 * quantized.config.num_layers

    def last_logits(model: Model) -> torch.Tensor:
        ids = torch.arange(3, 40)
        kv = allocate_kv_cache(model.config, num_blocks=3, block_size=16, dtype=torch.float32)
        meta = AttentionMetadata.build([len(ids)], [len(ids)], [[2, 0, 1]], block_size=16)
        with torch.inference_mode():
            return model(ids, torch.arange(len(ids)), kv, meta, torch.tensor([len(ids) - 1]))[0]

    assert last_logits(quantized).argmax() == last_logits(reference).argmax()


def test_a_longrope_phi3_gguf_is_refused_naming_its_factors(tmp_path: Path) -> None:
    """Phi-3 128k / Phi-4-mini as converted: LongRoPE's per-frequency factors as ``rope_factors_long`` and
    ``rope_factors_short`` tensors and an attention factor. The engine does not run LongRoPE (a directory with
    ``rope_type: longrope`` is refused too), so the file is refused, naming the tensors, before any weight loads;
    the attention factor alone is refused as well."""
    rotary_pairs = 16 * 3 // 4 // 2
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.75,
        "original_max_position_embeddings": 64,
        "long_factor": [1.0 + i for i in range(rotary_pairs)],
        "short_factor": [1.0] * rotary_pairs,
    }
    hf_dir = build_checkpoint(
        tmp_path / "hf", "phi3", seed=13, partial_rotary_factor=0.75, sliding_window=None, pad_token_id=PAD
    )
    config = json.loads((hf_dir / "config.json").read_text()) | {"rope_parameters": rope}
    (hf_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="rope_type"):
        load_config(resolve_model(str(hf_dir)))
    gguf_path = write_llama_gguf(hf_dir, tmp_path / "phi3-128k.gguf", architecture="phi3")
    with pytest.raises(UnsupportedModelError, match=r"rope_factors_long\.weight, rope_factors_short\.weight"):
        load_config(resolve_model(str(gguf_path)))
    with pytest.raises(UnsupportedModelError, match="rope_factors_long"):
        load_model(resolve_model(str(gguf_path)), torch.float32, TorchOps())
    metadata = read_gguf_metadata(gguf_path)
    with pytest.raises(UnsupportedModelError, match=r"phi3\.rope\.scaling\.attn_factor=1\.\d+"):
        ModelConfig.from_gguf(metadata, has_output_weight=True)


@pytest.mark.parametrize(
    ("architecture", "rotary", "named"),
    [
        ("llama", 8, r"llama\.rope\.dimension_count=8 .* phi3 files only"),  # head size 16: only phi3 reads it
        ("phi3", 5, r"phi3\.rope\.dimension_count=5"),  # not pairs of features
    ],
)
def test_a_rope_dimension_count_the_engine_cannot_follow_is_named(architecture: str, rotary: int, named: str) -> None:
    metadata = {
        "general.architecture": architecture,
        f"{architecture}.block_count": 1,
        f"{architecture}.context_length": 64,
        f"{architecture}.embedding_length": 64,
        f"{architecture}.feed_forward_length": 128,
        f"{architecture}.attention.head_count": 4,
        f"{architecture}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{architecture}.rope.dimension_count": rotary,
        f"{architecture}.vocab_size": 32,
    }
    with pytest.raises(UnsupportedModelError, match=named):
        ModelConfig.from_gguf(metadata, has_output_weight=True)


@pytest.fixture
def sp() -> Iterator[SentencePieceReference]:
    reference = train_sentencepiece()
    yield reference
    reference.close()


def test_a_sentencepiece_llama_gguf_serves_prompts_end_to_end(sp: SentencePieceReference, tmp_path: Path) -> None:
    """Llama 2's kind of file: a SentencePiece vocabulary (byte fallback, BOS added, an [INST] chat template) on a
    tiny random Llama. Through the offline LLM, the prompt's ids are SentencePiece's own, the greedy tokens are
    transformers' on the checkpoint the GGUF was converted from, and the streamed text is those tokens' text."""
    import transformers

    hf_dir = build_checkpoint(
        tmp_path / "hf", "llama", seed=9, vocab_size=sp.vocab_size(), bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id()
    )
    llm = LLM(
        str(write_llama_gguf(hf_dir, tmp_path / "spm.gguf", sentencepiece=sp)), dtype="float32", device=TEST_DEVICE
    )
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)

    prompt = "The capital of France is  🦜"
    (out,) = llm.generate(prompt, greedy)
    assert out.prompt_token_ids == [sp.bos_id(), *sp.encode(prompt)]
    reference = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        expected = reference.generate(torch.tensor([out.prompt_token_ids]), max_new_tokens=16, do_sample=False)
    assert out.token_ids == expected[0, len(out.prompt_token_ids) :].tolist()
    assert out.text == llm.tokenizer.decode(out.token_ids)

    (chat,) = llm.chat([{"role": "user", "content": "Name a river."}], greedy)
    assert chat.prompt_token_ids == [sp.bos_id(), *sp.encode("[INST] Name a river. [/INST]")]
    assert "sentencepiece" not in sys.modules  # kept out of engine processes (see its module)
