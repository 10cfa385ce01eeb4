"""``bench/shaped_checkpoint.py`` writes a checkpoint the engine serves with exactly the shape it names.

The GPU engine profile (``llama3-8b-h100``) was measured on such a checkpoint, so a wrong tensor name or a shape
field the engine reads differently would have timed another model. SmolLM2's shape is checked end to end here
(the 8B one is the same code with other numbers, and 16 GB).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from shoal.engine import LLM, SamplingParams
from shoal.engine.model.packed_linear import PackedLinear
from shoal.model_registry import resolve_model
from shoal.tokenizer.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import shaped_checkpoint

pytestmark = pytest.mark.slow


def test_the_smollm2_shape_is_served_with_its_layers_heads_vocabulary_and_tokenizer(tmp_path: Path) -> None:
    shaped_checkpoint.write_tokenizer(tmp_path / "tokenizer")
    shaped_checkpoint.write_weights("smollm2-135m", tmp_path / "tokenizer", tmp_path / "model", seed=0)

    llm = LLM(str(tmp_path / "model"), device="cpu", dtype="float32", num_kv_blocks=16)
    shape, config = shaped_checkpoint.SHAPES["smollm2-135m"], llm.engine.model_config
    assert (config.num_layers, config.hidden_size, config.intermediate_size) == (30, 576, 1536)
    assert (config.num_heads, config.num_kv_heads, config.vocab_size) == (9, 3, shape["vocab_size"])
    assert config.tie_word_embeddings and config.rope_theta == shape["rope_theta"]
    model = llm.engine.runner.model
    # a CPU's oneDNN-packed projections hold their weights as packed copies, not parameters (a tied head keeps both)
    packed = [m.packed for m in model.modules() if isinstance(m, PackedLinear) and getattr(m, "weight", None) is None]
    parameters = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in packed)
    assert 134e6 < parameters < 135e6  # SmolLM2-135M: 134.5M with the LM head tied to the embedding
    (out,) = llm.generate("The capital of France is", SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    assert len(out.token_ids) == 3
    text = "Shoal serves 12 models: SmolLM2-135M, Llama-3-8B... café 🐟"
    assert llm.tokenizer.encode(text) == Tokenizer.from_source(resolve_model("smollm2-135m")).encode(text)
    assert all(torch.isfinite(p).all() for p in llm.engine.runner.model.parameters())
