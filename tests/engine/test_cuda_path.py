"""The engine on a CUDA device: weights, KV cache and sampling there, Triton kernels by default.

Runs wherever torch sees a GPU; skipped, with the reason, on a CPU-only machine (where ``--device cuda`` is an
error: ``test_hardware_choice.py`` and ``test_generate_cli.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.devices import needs_gpu

from shoal.engine import LLM, SamplingParams

pytestmark = needs_gpu

PROMPTS = [list(range(3, 40)), [7, 9, 11, 200, 5, 5, 80], list(range(100, 164))]


def test_cuda_engine_places_everything_on_the_gpu_and_greedy_tokens_equal_the_cpus(tiny_gqa_llama_dir: Path) -> None:
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    gpu = LLM(str(tiny_gqa_llama_dir), device="cuda", dtype="float32", num_kv_blocks=64)
    core = gpu.engine
    assert core.device == "cuda"
    assert all(p.device.type == "cuda" for p in core.runner.model.parameters())
    assert all(k.device.type == "cuda" and v.device.type == "cuda" for k, v in core.runner.kv_caches)
    assert core.sampler.generator.device.type == "cuda"
    assert core.runner.model.layers[0].self_attn.ops.name == "triton"
    on_gpu = [o.token_ids for o in gpu.generate(PROMPTS, params)]

    cpu = LLM(str(tiny_gqa_llama_dir), device="cpu", dtype="float32", num_kv_blocks=64)
    assert on_gpu == [o.token_ids for o in cpu.generate(PROMPTS, params)]


def test_cuda_auto_dtype_is_half_precision_and_seeded_sampling_is_reproducible(tiny_gqa_llama_dir: Path) -> None:
    llm = LLM(str(tiny_gqa_llama_dir), num_kv_blocks=64)  # device auto -> cuda, dtype auto -> bf16 / fp16
    assert llm.engine.device == "cuda" and llm.engine.dtype in (torch.bfloat16, torch.float16)
    params = SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, seed=7)
    first = llm.generate(PROMPTS[:1], params)[0].token_ids
    assert llm.generate(PROMPTS[:1], params)[0].token_ids == first


@pytest.mark.parametrize("checkpoint", ["tiny_mixtral_dir", "tiny_qwen3_moe_dir"])
def test_cuda_mixture_of_experts_greedy_tokens_equal_the_cpus(checkpoint: str, request: pytest.FixtureRequest) -> None:
    """The experts run on the Triton grouped matmul (one launch per projection for every chosen expert)."""
    model_dir: Path = request.getfixturevalue(checkpoint)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    gpu = LLM(str(model_dir), device="cuda", dtype="float32", num_kv_blocks=64)
    assert all(p.device.type == "cuda" for p in gpu.engine.runner.model.parameters())
    on_gpu = [o.token_ids for o in gpu.generate(PROMPTS, params)]
    cpu = LLM(str(model_dir), device="cpu", dtype="float32", num_kv_blocks=64)
    assert on_gpu == [o.token_ids for o in cpu.generate(PROMPTS, params)]


@pytest.mark.parametrize("checkpoint", ["tiny_mistral_window_dir", "tiny_gemma2_dir"])
def test_cuda_windowed_and_soft_capped_greedy_tokens_equal_the_cpus(
    checkpoint: str, request: pytest.FixtureRequest
) -> None:
    """A 6-token window (every layer; alternate layers for Gemma 2, with scores soft-capped at 2) on the Triton
    attention kernels' compiled window and cap paths."""
    model_dir: Path = request.getfixturevalue(checkpoint)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    gpu = LLM(str(model_dir), device="cuda", dtype="float32", num_kv_blocks=64)
    assert gpu.engine.runner.model.layers[0].self_attn.ops.name == "triton"
    on_gpu = [o.token_ids for o in gpu.generate(PROMPTS, params)]
    cpu = LLM(str(model_dir), device="cpu", dtype="float32", num_kv_blocks=64)
    assert on_gpu == [o.token_ids for o in cpu.generate(PROMPTS, params)]
