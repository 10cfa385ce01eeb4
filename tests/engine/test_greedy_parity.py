"""Greedy outputs equal Hugging Face transformers' ``generate``, token for token, under a hostile schedule.

Requests arrive over several steps, the token budget forces chunked prefill, several prompts share a long
prefix (prefix-cache hits) and the KV cache is too small for all of them at once (preemption by recompute).
Whatever the scheduler does, each sequence must come out exactly as if it had run alone in transformers.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from kv_invariants import assert_all_free
from support.devices import TEST_DEVICE

from shoal.engine.core import EngineConfig, EngineCore, SamplingParams

MAX_TOKENS = 12


def _prompts(vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(3, vocab_size) for _ in range(24)]
    prompts = [[rng.randrange(3, vocab_size) for _ in range(n)] for n in (1, 5, 17, 33, 40, 9)]
    prompts += [shared + [rng.randrange(3, vocab_size) for _ in range(n)] for n in (1, 7, 12, 0)]
    return prompts


def _hf_greedy(model: torch.nn.Module, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    outputs = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=max_tokens,
                do_sample=False,
            )
            outputs.append(ids[0, len(prompt) :].tolist())
    return outputs


def _hf_model(model_dir: Path) -> torch.nn.Module:
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def run_staggered(
    engine: EngineCore, prompts: list[list[int]], params: SamplingParams, per_step: int = 2
) -> dict[str, list[int]]:
    """Adds ``per_step`` requests between steps, then steps until done; returns each request's tokens."""
    tokens: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    queue = list(enumerate(prompts))
    while queue or engine.has_unfinished():
        for i, prompt in queue[:per_step]:
            engine.add_request(str(i), prompt, params)
        del queue[:per_step]
        for out in engine.step():
            tokens[out.request_id].extend(out.new_token_ids)
    return tokens


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "checkpoint",
    [
        "tiny_llama_dir",
        "tiny_gqa_llama_dir",
        "tiny_qwen2_dir",
        "tiny_qwen3_dir",
        "tiny_phi3_dir",
        "tiny_mistral_window_dir",
        "tiny_gemma2_dir",
        "tiny_gemma3_dir",
        "tiny_mixtral_dir",
        "tiny_qwen3_moe_dir",
    ],
)
def test_tiny_models_match_transformers_under_chunking_prefix_hits_and_preemption(
    checkpoint: str, request: pytest.FixtureRequest
) -> None:
    model_dir: Path = request.getfixturevalue(checkpoint)
    engine = EngineCore.from_config(
        EngineConfig(
            model=str(model_dir),
            dtype="float32",
            block_size=4,
            max_num_batched_tokens=16,
            max_num_seqs=6,
            # the windowed model releases blocks behind its window, so it needs a smaller cache to preempt
            num_kv_blocks=14 if checkpoint == "tiny_mistral_window_dir" else 28,
            seed=0,
            device=TEST_DEVICE,
        )
    )
    prompts = _prompts(engine.model_config.vocab_size, seed=len(checkpoint))
    got = run_staggered(engine, prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS))

    expected = _hf_greedy(_hf_model(model_dir), prompts, MAX_TOKENS)
    for i, want in enumerate(expected):
        assert got[str(i)] == want, f"prompt {i} (length {len(prompts[i])})"
    stats = engine.stats()
    assert stats.num_preemptions > 0, "the KV budget was meant to force preemption"
    assert stats.prefix_hit_tokens > 0, "the shared prefix was meant to hit the cache"
    assert not engine.has_unfinished()
    assert_all_free(engine.block_manager)


@pytest.mark.timeout(300)
def test_a_windowed_model_runs_requests_its_cache_could_not_hold_whole(tiny_mistral_window_dir: Path) -> None:
    """Two 52-token requests need 26 blocks of 4 whole; a 6-token window lets them share 14 without preemption."""
    engine = EngineCore.from_config(
        EngineConfig(
            model=str(tiny_mistral_window_dir),
            dtype="float32",
            block_size=4,
            max_num_batched_tokens=8,
            num_kv_blocks=14,
            seed=0,
            device=TEST_DEVICE,
        )
    )
    rng = random.Random(3)
    prompts = [[rng.randrange(3, engine.model_config.vocab_size) for _ in range(40)] for _ in range(2)]
    got = run_staggered(engine, prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), per_step=2)

    expected = _hf_greedy(_hf_model(tiny_mistral_window_dir), prompts, MAX_TOKENS)
    assert [got["0"], got["1"]] == expected
    assert engine.stats().num_preemptions == 0
    assert_all_free(engine.block_manager)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smollm2_matches_transformers_on_the_bundled_gguf(smollm2_hf_model: torch.nn.Module) -> None:
    engine = EngineCore.from_config(
        EngineConfig(
            model="smollm2-135m",
            dtype="float32",
            quantization="none",  # parity is the unquantized path's: auto would serve the Q4_1 codes as int4
            max_num_batched_tokens=24,
            num_kv_blocks=5,
            seed=0,
            device=TEST_DEVICE,
        )
    )
    preamble = "You are a helpful assistant who answers questions about the geography and history of Europe. "
    texts = [
        "The capital of France is",
        preamble + "Question: what is the capital of Italy? Answer:",
        "def fibonacci(n):",
        preamble + "Question: which river flows through Vienna? Answer:",
    ]
    prompts = [engine.tokenizer.encode(t) for t in texts]
    got = run_staggered(engine, prompts, SamplingParams(temperature=0.0, max_tokens=10), per_step=2)

    expected = _hf_greedy(smollm2_hf_model, prompts, 10)
    for i, want in enumerate(expected):
        assert got[str(i)] == want, texts[i]
    assert engine.stats().prefix_hit_tokens > 0
    assert engine.stats().num_preemptions > 0
    assert_all_free(engine.block_manager)
