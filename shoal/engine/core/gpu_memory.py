"""Measures a GPU's memory for the KV budget: the thin CUDA edge of ``shoal.engine.core.kv_budget``.

Three readings, as vLLM takes them: the free memory before loading (a model whose weights exceed it is refused
before the copy starts), the weights once loaded, and the peak of a profiling forward at
``max_num_batched_tokens`` (one dummy prompt of that many tokens through the real runner, on a throwaway KV
cache just big enough for it). What the process grew outside torch's allocator meanwhile is the non-torch part.
The arithmetic on these numbers is ``kv_budget``'s, pure and tested on a CPU; only this file touches CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shoal.engine.core.kv_budget import CardMemory, check_weights_fit
from shoal.engine.core.model_runner import ModelRunner
from shoal.engine.core.request import Request
from shoal.engine.core.sampler import Sampler
from shoal.engine.core.sampling_params import SamplingParams
from shoal.engine.core.scheduler import SchedulerOutput
from shoal.engine.core.step_inputs import StepInputs
from shoal.engine.lora.manager import LoRAManager
from shoal.engine.model import Model, allocate_kv_cache, build_model, kv_cache_bytes_per_block
from shoal.engine.model_config import ModelConfig
from shoal.kernels import KernelOps


def weight_bytes(model_config: ModelConfig, dtype: torch.dtype, ops: KernelOps) -> int:
    """The weights' size in ``dtype``, from the model's shape alone (built on the meta device; a tied embedding
    counted once)."""
    with torch.device("meta"):
        model = build_model(model_config, ops)
    return sum(p.numel() for p in model.parameters()) * dtype.itemsize


@dataclass(frozen=True)
class Baseline:
    """The card before the weights load: its size, what is free, and what the process holds outside torch."""

    total: int
    free: int
    non_torch: int

    @classmethod
    def before_loading(cls, model_config: ModelConfig, dtype: torch.dtype, ops: KernelOps) -> Baseline:
        """Measures the card; ``ValueError`` with both sizes when the model's weights exceed its free memory."""
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        check_weights_fit(weight_bytes(model_config, dtype, ops), free)
        return cls(total, free, total - free - torch.cuda.memory_reserved())


def profile(
    model: Model,
    dtype: torch.dtype,
    baseline: Baseline,
    tokens: int,
    block_size: int,
    sampler: Sampler,
    lora: LoRAManager | None,
) -> CardMemory:
    """Runs the profiling forward over ``tokens`` dummy tokens; returns the card's memory."""
    config = model.config
    weights = torch.cuda.memory_allocated()
    num_blocks = -(-tokens // block_size)
    kv_caches = allocate_kv_cache(config, num_blocks, block_size, dtype, "cuda")
    request = Request("profile", [0] * tokens, SamplingParams(temperature=0.0, max_tokens=1), arrival_time=0.0)
    request.block_ids = list(range(num_blocks))
    runner = ModelRunner(
        model, kv_caches, StepInputs(1, tokens, tokens, block_size, "cuda"), sampler, "cuda", None, lora
    )
    torch.cuda.reset_peak_memory_stats()
    runner.execute(SchedulerOutput([request], {"profile": tokens}))
    torch.cuda.synchronize()
    kv_bytes = num_blocks * kv_cache_bytes_per_block(config, block_size, dtype)
    activations = torch.cuda.max_memory_allocated() - weights - kv_bytes
    del runner, kv_caches
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    non_torch = max(total - free - torch.cuda.memory_reserved() - baseline.non_torch, 0)
    return CardMemory(
        total=baseline.total, free=baseline.free, weights=weights, activations=max(activations, 0), non_torch=non_torch
    )
