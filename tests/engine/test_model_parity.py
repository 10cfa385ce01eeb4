"""Our model's logits equal Hugging Face transformers' on the same checkpoint, through the paged KV cache.

Several sequences of different lengths go through a schedule of steps that packs them together: a chunked
prefill, prefills alongside decodes, then decodes, each sequence's blocks scattered at random over the cache.
Every row's logits are compared against transformers' full-sequence forward at the same position.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import transformers

from shoal.engine.loader import load_model
from shoal.engine.model import CausalLM, allocate_kv_cache
from shoal.kernels import AttentionMetadata, TorchOps
from shoal.model_registry import resolve_model

BLOCK_SIZE = 4
# Tokens each sequence receives per step (0: it sits the step out). Step 0 prefills sequence 0 in part
# (chunked), step 1 finishes it next to the others' whole prompts, the rest are decodes and a late chunk.
SCHEDULE = [[5, 0, 0], [4, 13, 6], [1, 1, 3], [1, 1, 1], [1, 1, 1]]


def paged_logits(
    model: CausalLM, sequences: list[list[int]], schedule: list[list[int]], seed: int
) -> list[torch.Tensor]:
    """Runs the schedule; returns, per sequence, the fp32 logits of every position it was fed."""
    rng = random.Random(seed)
    blocks_needed = [-(-len(seq) // BLOCK_SIZE) for seq in sequences]
    pool = list(range(sum(blocks_needed) + 3))
    rng.shuffle(pool)
    tables = []
    for count in blocks_needed:
        tables.append(pool[:count])
        pool = pool[count:]
    num_blocks = max(max(t) for t in tables) + 1
    kv = allocate_kv_cache(model.config, num_blocks=num_blocks, block_size=BLOCK_SIZE, dtype=torch.float32)
    done = [0] * len(sequences)
    outputs: list[list[torch.Tensor]] = [[] for _ in sequences]
    for step in schedule:
        active = [s for s, n in enumerate(step) if n]
        ids = [tok for s in active for tok in sequences[s][done[s] : done[s] + step[s]]]
        positions = [p for s in active for p in range(done[s], done[s] + step[s])]
        meta = AttentionMetadata.build(
            query_lens=[step[s] for s in active],
            seq_lens=[done[s] + step[s] for s in active],
            block_tables=[tables[s] for s in active],
            block_size=BLOCK_SIZE,
        )
        with torch.inference_mode():
            logits = model(torch.tensor(ids), torch.tensor(positions), kv, meta, torch.arange(len(ids)))
        row = 0
        for s in active:
            outputs[s].append(logits[row : row + step[s]])
            row += step[s]
            done[s] += step[s]
    return [torch.cat(chunks) for chunks in outputs]


def reference_logits(hf_model: transformers.PreTrainedModel, sequence: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf_model(torch.tensor([sequence])).logits[0].float()


def assert_parity(
    model: CausalLM, hf_model: transformers.PreTrainedModel, vocab: int, atol: float, seed: int = 0
) -> None:
    gen = torch.Generator().manual_seed(seed)
    lengths = [sum(step[s] for step in SCHEDULE) for s in range(len(SCHEDULE[0]))]
    sequences = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    ours = paged_logits(model, sequences, SCHEDULE, seed)
    for seq, got in zip(sequences, ours, strict=True):
        expected = reference_logits(hf_model, seq)
        torch.testing.assert_close(got, expected, atol=atol, rtol=1e-4)
        assert torch.equal(got.argmax(-1), expected.argmax(-1))


@pytest.mark.parametrize(
    "checkpoint",
    [
        "tiny_llama_dir",
        "tiny_gqa_llama_dir",
        "tiny_qwen2_dir",
        "tiny_qwen3_dir",
        "tiny_phi3_dir",
        "tiny_llama3_scaled_dir",
        "tiny_mistral_dir",
        "tiny_mistral_window_dir",
        "tiny_qwen2_window_dir",
        "tiny_gemma2_dir",
        "tiny_gemma3_dir",
        "tiny_mixtral_dir",
        "tiny_mixtral_window_dir",
        "tiny_qwen3_moe_dir",
    ],
)
def test_tiny_checkpoint_logits_match_transformers(checkpoint: str, request: pytest.FixtureRequest) -> None:
    directory: Path = request.getfixturevalue(checkpoint)
    model = load_model(resolve_model(str(directory)), torch.float32, TorchOps())
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    assert_parity(model, hf_model, model.config.vocab_size, atol=1e-4)


@pytest.mark.slow
def test_smollm2_logits_match_transformers(
    smollm2_model: CausalLM, smollm2_hf_model: transformers.PreTrainedModel
) -> None:
    assert_parity(smollm2_model, smollm2_hf_model, smollm2_model.config.vocab_size, atol=2e-3)
