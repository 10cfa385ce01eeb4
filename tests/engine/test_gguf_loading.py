"""A GGUF file loads into the same model and tokenizer as the Hugging Face checkpoint it was converted from."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from sentencepiece_reference import SentencePieceReference
from tiny_checkpoints import build_checkpoint, train_sentencepiece, write_llama_gguf

from shoal.engine import LLM, SamplingParams
from shoal.engine.loader import load_model
from shoal.engine.model import allocate_kv_cache
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
    llm = LLM(str(write_llama_gguf(hf_dir, tmp_path / "spm.gguf", sentencepiece=sp)), dtype="float32")
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
    assert "sentencepiece" not in sys.modules  # its OpenMP runtime would turn the C kernels off (see its module)
