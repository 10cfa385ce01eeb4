"""The whole engine on its Triton path (interpreted on CPU, compiled on a GPU host) generates exactly the torch
path's greedy tokens.

Prompts of different lengths share the batch, with a block size small enough that sequences span several
blocks and a token budget small enough to chunk the longest prompt, so prefill, chunked prefill, mixed and
decode-only steps all go through the Triton kernels; a later prompt sharing the first one's beginning then
prefills after a prefix-cache hit. A Mixtral runs its experts through the grouped-matmul kernel too. A Mistral
with a 6-token window (shorter than every prompt but one, so its blocks behind the window are released as it
goes) and a Gemma 2 (the window on alternate layers, scores soft-capped at 2) run the kernels' window and
soft-cap paths. A batch mixing the base model and two LoRA adapters runs the LoRA kernels.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from kernel_lane import KERNEL_DEVICE, LANE

pytestmark = [*LANE, pytest.mark.timeout(300)]

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"


def _build(directory: Path, name: str) -> Path:
    """One of the engine tests' shared tiny checkpoints (their fixtures live in a conftest this folder cannot see).
    Their folder goes on ``sys.path``, as pytest puts it there for their own conftest: the builder imports a
    neighbour (``sentencepiece_reference``)."""
    if str(ENGINE_TESTS) not in sys.path:
        sys.path.insert(0, str(ENGINE_TESTS))
    return importlib.import_module("tiny_checkpoints").build_shared_checkpoint(directory, name)


@pytest.fixture(scope="module")
def tiny_gqa_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 query heads over 2 KV heads, head_dim 16, 2 layers: the engine tests' GQA Llama."""
    return _build(tmp_path_factory.mktemp("tiny-gqa-llama"), "gqa-llama")


@pytest.fixture(scope="module")
def tiny_mixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine tests' Mixtral: 4 experts, 2 per token, GQA."""
    return _build(tmp_path_factory.mktemp("tiny-mixtral"), "mixtral")


@pytest.fixture(scope="module")
def tiny_mistral_window_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine tests' windowed Mistral: every query sees only its last 6 positions."""
    return _build(tmp_path_factory.mktemp("tiny-mistral-window"), "mistral-window")


@pytest.fixture(scope="module")
def tiny_gemma2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine tests' Gemma 2: a 6-token window on every other layer of 4, scores soft-capped at 2."""
    return _build(tmp_path_factory.mktemp("tiny-gemma2"), "gemma2")


def _greedy(model_dir: Path, backend: str) -> tuple[list[list[int]], int]:
    """Greedy tokens of every prompt, and how many prompt tokens the last one found in the prefix cache."""
    from shoal.engine import LLM, SamplingParams

    llm = LLM(
        str(model_dir),
        attention_backend=backend,
        dtype="float32",
        block_size=4,
        max_num_batched_tokens=16,
        num_kv_blocks=64,
        device=KERNEL_DEVICE,
    )
    prompts = [
        [5, 17, 99, 3, 42, 8, 250, 61, 7, 13, 120, 33, 2, 90, 11, 64, 30, 18, 77],  # chunked: over 16 tokens
        [300, 12],
        [9, 81, 140, 6, 55],
    ]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = llm.generate(prompts, params)
    outputs += llm.generate([[*prompts[0][:13], 7, 250, 3]], params)
    return [out.token_ids for out in outputs], outputs[-1].num_cached_tokens


@pytest.mark.parametrize(
    "checkpoint", ["tiny_gqa_llama_dir", "tiny_mixtral_dir", "tiny_mistral_window_dir", "tiny_gemma2_dir"]
)
def test_engine_greedy_tokens_match_between_triton_and_torch_backends(
    checkpoint: str, request: pytest.FixtureRequest
) -> None:
    model_dir: Path = request.getfixturevalue(checkpoint)
    torch_tokens, torch_cached = _greedy(model_dir, "torch")
    triton_tokens, triton_cached = _greedy(model_dir, "triton")

    assert all(len(tokens) == 6 for tokens in torch_tokens)
    assert triton_tokens == torch_tokens
    assert triton_cached == torch_cached == 12  # three full 4-token blocks of the first prompt


def _lora_greedy(model_dir: Path, backend: str, adapters: dict[str, Path]) -> list[list[int]]:
    """Greedy tokens of one batch: the same prompt for the base model and for each adapter."""
    from shoal.engine.core import EngineConfig, EngineCore, SamplingParams

    core = EngineCore.from_config(
        EngineConfig(
            model=str(model_dir),
            attention_backend=backend,
            dtype="float32",
            device=KERNEL_DEVICE,
            quantization="none",
            block_size=4,
            max_num_batched_tokens=16,  # the 19-token prompts are chunked
            num_kv_blocks=64,
            enable_lora=True,
            max_loras=len(adapters),
            max_lora_rank=8,
            lora_modules=tuple((name, str(path)) for name, path in adapters.items()),
        )
    )
    prompt = [5, 17, 99, 3, 42, 8, 250, 61, 7, 13, 120, 33, 2, 90, 11, 64, 30, 18, 77]
    names: list[str | None] = [None, *adapters]
    for i, name in enumerate(names):
        core.add_request(str(i), prompt, SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True), lora_name=name)
    tokens: dict[str, list[int]] = {}
    while core.has_unfinished():
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
    return [tokens[str(i)] for i in range(len(names))]


def test_a_lora_batch_on_triton_gives_the_torch_paths_tokens(tiny_gqa_llama_dir: Path, tmp_path: Path) -> None:
    """The base model and two adapters (q/v at rank 4, padded to 8; every projection at rank 8) in one batch,
    prefills chunked: the LoRA kernels give the greedy tokens of the torch path's masked and grouped products."""
    from lora_adapters import write_adapter  # tests/engine, on sys.path since _build

    every = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    adapters = {
        "qv": write_adapter(
            tiny_gqa_llama_dir, tmp_path / "qv", 1, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]
        ),
        "all": write_adapter(tiny_gqa_llama_dir, tmp_path / "all", 2, r=8, lora_alpha=16, target_modules=every),
    }
    torch_tokens = _lora_greedy(tiny_gqa_llama_dir, "torch", adapters)
    assert len({tuple(tokens) for tokens in torch_tokens}) == 3, "each adapter changes the greedy tokens"
    assert _lora_greedy(tiny_gqa_llama_dir, "triton", adapters) == torch_tokens
