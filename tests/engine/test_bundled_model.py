"""The bundled SmolLM2 answers through our model alone: tokenizer, GGUF loader, paged cache, greedy decoding."""

from __future__ import annotations

import pytest
import torch

from shoal.engine.model import CausalLM, allocate_kv_cache
from shoal.kernels import AttentionMetadata
from shoal.tokenizer import Tokenizer, detokenizer_for

BLOCK_SIZE = 16


def greedy(model: CausalLM, prompt: list[int], max_new_tokens: int, eos: frozenset[int]) -> list[int]:
    """The simplest engine: one sequence, prefill then decode one token at a time through the paged cache."""
    blocks = [5, 2, 7]  # deliberately scattered
    kv = allocate_kv_cache(model.config, num_blocks=8, block_size=BLOCK_SIZE, dtype=torch.float32)
    tokens, generated = list(prompt), []
    new = list(prompt)
    with torch.inference_mode():
        while len(generated) < max_new_tokens:
            meta = AttentionMetadata.build([len(new)], [len(tokens)], [blocks], BLOCK_SIZE)
            positions = torch.arange(len(tokens) - len(new), len(tokens))
            logits = model(torch.tensor(new), positions, kv, meta, torch.tensor([len(new) - 1]))
            token = int(logits[0].argmax())
            if token in eos:
                break
            generated.append(token)
            tokens.append(token)
            new = [token]
    return generated


@pytest.mark.slow
def test_smollm2_continues_with_paris(smollm2_model: CausalLM, smollm2_tokenizer: Tokenizer) -> None:
    prompt = smollm2_tokenizer.encode("The capital of France is")
    generated = greedy(smollm2_model, prompt, 4, smollm2_tokenizer.eos_token_ids)
    detok = detokenizer_for(smollm2_tokenizer)
    text = "".join(detok.push([t]) for t in generated) + detok.flush()
    assert text.startswith(" Paris")


@pytest.mark.slow
def test_smollm2_chat_answers_with_paris(smollm2_model: CausalLM, smollm2_tokenizer: Tokenizer) -> None:
    prompt = smollm2_tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    generated = greedy(smollm2_model, smollm2_tokenizer.encode(prompt), 16, smollm2_tokenizer.eos_token_ids)
    assert "Paris" in smollm2_tokenizer.decode(generated)
