"""LoRA through Shoal's engine equals transformers + peft with the adapter merged, for several adapters at once.

One engine batch mixes the base model and three adapters (q/v only; every attention and MLP projection; rsLoRA on
k/o/down with another rank) over the same prompt, with chunked prefill (a small token budget) and the prefix cache
on: identical prompts must not share KV blocks across adapters, and a second round of the same requests hits the
cache of its own adapter. Each row's greedy tokens and top log-probabilities equal the merged reference's, both
ways the projections add the deltas (masked, grouped by slot).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lora_adapters import greedy_reference, merged_model, write_adapter

from shoal.engine.core import EngineConfig, EngineCore, InvalidRequestError, SamplingParams

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTERS = {
    "qv": dict(seed=1, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    "all": dict(seed=2, r=8, lora_alpha=16, target_modules=ALL),
    "rslora": dict(seed=3, r=6, lora_alpha=4, use_rslora=True, target_modules=["k_proj", "o_proj", "down_proj"]),
}
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def adapter_dirs(tiny_gqa_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lora-adapters")
    return {
        name: write_adapter(tiny_gqa_llama_dir, root / name, lora.pop("seed"), **lora)
        for name, lora in ((n, dict(o)) for n, o in ADAPTERS.items())
    }


def run_batch(core: EngineCore, prompt: list[int], names: list[str | None], tag: str) -> dict[str | None, list]:
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)
    for i, name in enumerate(names):
        core.add_request(f"{tag}-{i}", prompt, params, lora_name=name)
    tokens: dict[str, list[int]] = {}
    logprobs: dict[str, list] = {}
    cached: dict[str, int] = {}
    while core.has_unfinished():
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            logprobs.setdefault(out.request_id, []).extend(out.new_logprobs or [])
            cached[out.request_id] = out.num_cached_tokens
    return {name: (tokens[f"{tag}-{i}"], logprobs[f"{tag}-{i}"], cached[f"{tag}-{i}"]) for i, name in enumerate(names)}


@pytest.mark.parametrize("way", ["masked", "grouped"])
def test_mixed_adapter_batch_matches_merged_peft(
    tiny_gqa_llama_dir: Path, adapter_dirs: dict[str, Path], way: str
) -> None:
    config = EngineConfig(
        model=str(tiny_gqa_llama_dir),
        dtype="float32",
        device="cpu",
        quantization="none",
        block_size=4,
        max_num_batched_tokens=24,  # four 19-token prompts: every prefill is chunked
        enable_lora=True,
        max_loras=3,
        max_lora_rank=8,
        lora_modules=tuple((name, str(path)) for name, path in adapter_dirs.items()),
    )
    core = EngineCore.from_config(config)
    assert core.lora is not None
    if way == "grouped":  # the way long batches take (lora_linear.py), here for batches of any size
        core.lora.masked_max_rows = 0
    prompt = core.tokenizer.encode("The capital of France is Paris. Once upon a time")[:19]
    names: list[str | None] = [None, *adapter_dirs]
    first = run_batch(core, prompt, names, "first")
    second = run_batch(core, prompt, names, "second")
    for name in names:
        reference = merged_model(tiny_gqa_llama_dir, adapter_dirs[name] if name else None)
        expected_tokens, expected_logprobs = greedy_reference(reference, prompt, MAX_TOKENS)
        for tokens, logprobs, _ in (first[name], second[name]):
            assert tokens == expected_tokens, name
            for got, want in zip(logprobs, expected_logprobs, strict=True):
                ids = [t.token_id for t in got.top]
                values = torch.tensor([t.logprob for t in got.top])
                torch.testing.assert_close(values, want[ids], atol=2e-4, rtol=1e-4)
        assert second[name][2] == 16, "the second round reuses its own adapter's four full prompt blocks"
    assert len({tuple(first[n][0]) for n in names}) == len(names), "each adapter changes the greedy tokens"


def test_adapters_of_fused_projections_match_merged_peft(tiny_phi3_dir: Path, tmp_path: Path) -> None:
    """Phi-3 names its fused ``qkv_proj`` and ``gate_up_proj`` itself: an adapter of those spans every part."""
    adapter = write_adapter(tiny_phi3_dir, tmp_path / "fused", 4, r=4, target_modules=["qkv_proj", "gate_up_proj"])
    config = EngineConfig(
        model=str(tiny_phi3_dir),
        dtype="float32",
        device="cpu",
        quantization="none",
        enable_lora=True,
        max_lora_rank=4,
        lora_modules=(("fused", str(adapter)),),
    )
    core = EngineCore.from_config(config)
    prompt = core.tokenizer.encode("Once upon a time there was a little fox")
    got = run_batch(core, prompt, [None, "fused"], "phi3")
    for name in (None, "fused"):
        reference = merged_model(tiny_phi3_dir, adapter if name else None)
        assert got[name][0] == greedy_reference(reference, prompt, MAX_TOKENS)[0], name
    assert got[None][0] != got["fused"][0]


def test_a_request_for_an_adapter_not_loaded_is_refused_naming_model(tiny_gqa_llama_dir: Path) -> None:
    core = EngineCore.from_config(
        EngineConfig(model=str(tiny_gqa_llama_dir), dtype="float32", device="cpu", quantization="none")
    )
    with pytest.raises(InvalidRequestError, match="model: no LoRA adapter 'sql' is loaded"):
        core.add_request("r", [1, 2, 3], SamplingParams(max_tokens=2), lora_name="sql")
    assert not core.has_unfinished()
