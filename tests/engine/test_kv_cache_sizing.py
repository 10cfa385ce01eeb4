"""The KV budget: its arithmetic matches the tensors allocated, and it says (or refuses) what a request may be."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.devices import TEST_DEVICE

from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.core.gpu_memory import weight_bytes
from shoal.engine.core.kv_budget import DEFAULT_KV_CACHE_BYTES, CardMemory, check_weights_fit, kv_budget
from shoal.engine.loader import load as load_module
from shoal.engine.loader import load_config, load_model
from shoal.engine.model import allocate_kv_cache, kv_cache_bytes_per_block
from shoal.engine.model_config import ModelConfig
from shoal.kernels import get_ops
from shoal.model_registry import resolve_model

CONFIG = ModelConfig(
    architecture="llama",
    hidden_size=96,
    intermediate_size=128,
    num_layers=3,
    num_heads=6,
    num_kv_heads=2,
    head_dim=16,
    vocab_size=50,
    rms_norm_eps=1e-6,
    rope_theta=1e4,
    max_position_embeddings=64,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bytes_per_block_matches_the_allocated_cache(dtype: torch.dtype) -> None:
    caches = allocate_kv_cache(CONFIG, num_blocks=5, block_size=16, dtype=dtype)
    assert len(caches) == CONFIG.num_layers
    assert all(k.shape == v.shape == (5, 16, 2, 16) and k.dtype == dtype for k, v in caches)
    allocated = sum(k.nbytes + v.nbytes for k, v in caches)
    assert allocated == 5 * kv_cache_bytes_per_block(CONFIG, 16, dtype)


def engine(**options: object) -> EngineConfig:
    return EngineConfig(model="unused", block_size=16, **options, device=TEST_DEVICE)  # type: ignore[arg-type]


def test_the_default_budget_holds_the_models_context_and_says_how_many_fit() -> None:
    budget = kv_budget(engine(), CONFIG, torch.float32)
    per_block = kv_cache_bytes_per_block(CONFIG, 16, torch.float32)
    assert budget.num_blocks == DEFAULT_KV_CACHE_BYTES // per_block and budget.max_model_len == 64
    assert budget.warning is None
    assert budget.summary() == (
        f"kv cache {budget.num_blocks} blocks of 16 tokens = {budget.tokens} tokens, 512 MiB (the default 512 MiB "
        "on a CPU, where --gpu-memory-utilization has no effect; --kv-cache-bytes sets it); "
        f"max_model_len 64: {budget.tokens // 64} requests of that length at once"
    )


def test_a_default_length_longer_than_the_cache_is_cut_with_a_warning_naming_the_option() -> None:
    budget = kv_budget(engine(num_kv_blocks=3), CONFIG, torch.float32)  # 48 tokens < the context's 64
    assert budget.max_model_len == 48
    assert budget.warning == (
        "max_model_len cut from the model's context length 64 to the 48 tokens the KV cache holds "
        "(num_kv_blocks); raise --kv-cache-bytes (kvCacheMemory) for longer requests"
    )
    assert budget.summary().endswith("max_model_len 48: 1 request of that length at once")


def test_an_explicit_length_the_cache_cannot_hold_is_an_error_naming_both_numbers() -> None:
    per_block = kv_cache_bytes_per_block(CONFIG, 16, torch.float32)
    with pytest.raises(ValueError, match=r"max_model_len 64 is longer than the KV cache holds \(32 tokens = 2 blocks"):
        kv_budget(engine(kv_cache_bytes=2 * per_block, max_model_len=64), CONFIG, torch.float32)
    assert kv_budget(engine(kv_cache_bytes=2 * per_block, max_model_len=32), CONFIG, torch.float32).max_model_len == 32
    with pytest.raises(ValueError, match="exceeds the model's context length"):
        kv_budget(engine(max_model_len=65), CONFIG, torch.float32)


GIB = 2**30
H100 = CardMemory(total=80 * GIB, free=79 * GIB, weights=16 * GIB, activations=2 * GIB, non_torch=GIB)


def test_on_a_gpu_the_cache_takes_what_the_utilization_leaves_after_weights_and_activations() -> None:
    per_block = kv_cache_bytes_per_block(CONFIG, 16, torch.bfloat16)
    budget = kv_budget(engine(gpu_memory_utilization=0.9), CONFIG, torch.bfloat16, H100)
    assert budget.num_blocks == (int(80 * GIB * 0.9) - 19 * GIB) // per_block
    assert "--gpu-memory-utilization 0.9 of the 80.00 GiB card: weights 16.00 GiB, activations 2.00 GiB" in (
        budget.summary()
    )
    half = kv_budget(engine(gpu_memory_utilization=0.5), CONFIG, torch.bfloat16, H100)
    assert half.num_blocks == (40 * GIB - 19 * GIB) // per_block


def test_explicit_sizes_override_the_utilization() -> None:
    per_block = kv_cache_bytes_per_block(CONFIG, 16, torch.bfloat16)
    assert kv_budget(engine(num_kv_blocks=7), CONFIG, torch.bfloat16, H100).num_blocks == 7
    assert kv_budget(engine(kv_cache_bytes=5 * per_block), CONFIG, torch.bfloat16, H100).num_blocks == 5


@pytest.mark.parametrize("value", [0, -0.5, 1.01])
def test_a_utilization_outside_zero_to_one_is_refused_naming_it(value: float) -> None:
    with pytest.raises(
        ValueError, match=rf"gpu_memory_utilization \(--gpu-memory-utilization\) must be in \(0, 1\], got {value}"
    ):
        engine(gpu_memory_utilization=value)


def test_a_utilization_that_leaves_nothing_after_the_weights_names_the_numbers() -> None:
    with pytest.raises(ValueError) as error:
        kv_budget(engine(gpu_memory_utilization=0.2), CONFIG, torch.bfloat16, H100)
    assert str(error.value).startswith(
        "--gpu-memory-utilization 0.2 allows 16.00 GiB of the 80.00 GiB card: weights 16.00 GiB, activations "
        "2.00 GiB, non-torch 1.00 GiB: 19.00 GiB is taken before any KV cache"
    )


def test_a_utilization_too_small_for_one_request_of_max_model_len_names_both_numbers() -> None:
    per_block = kv_cache_bytes_per_block(CONFIG, 16, torch.bfloat16)
    tight = CardMemory(
        total=100 * per_block, free=100 * per_block, weights=60 * per_block, activations=0, non_torch=0
    )  # 2 blocks at 0.62
    with pytest.raises(ValueError) as error:
        kv_budget(engine(gpu_memory_utilization=0.62, max_model_len=64), CONFIG, torch.bfloat16, tight)
    message = str(error.value)
    assert message.startswith("max_model_len 64 is longer than the KV cache holds (32 tokens = 2 blocks of 16")
    assert "--gpu-memory-utilization 0.62" in message and "raise --gpu-memory-utilization" in message
    cut = kv_budget(engine(gpu_memory_utilization=0.62), CONFIG, torch.bfloat16, tight)  # the default is cut
    assert cut.max_model_len == 32 and "raise --gpu-memory-utilization (gpuMemoryUtilization)" in str(cut.warning)


def test_a_utilization_more_than_was_free_at_start_up_is_refused_naming_both() -> None:
    shared = CardMemory(total=80 * GIB, free=40 * GIB, weights=16 * GIB, activations=2 * GIB, non_torch=GIB)
    with pytest.raises(ValueError) as error:
        kv_budget(engine(gpu_memory_utilization=0.9), CONFIG, torch.bfloat16, shared)
    assert str(error.value).startswith(
        "--gpu-memory-utilization 0.9 asks for 72.00 GiB of the 80.00 GiB GPU, but only 40.00 GiB was free at start-up"
    )
    assert kv_budget(engine(gpu_memory_utilization=0.5), CONFIG, torch.bfloat16, shared).num_blocks > 0


def test_a_model_larger_than_the_free_memory_is_refused_with_both_sizes() -> None:
    with pytest.raises(ValueError, match=r"its weights take 16.00 GiB but the GPU has 12.50 GiB free"):
        check_weights_fit(16 * GIB, int(12.5 * GIB))
    check_weights_fit(16 * GIB, 16 * GIB)


def test_the_weights_size_is_known_before_loading(tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the fit check compares with the free memory: the loaded model's parameters, byte for byte (unpacked, as
    on a GPU: a CPU's oneDNN-packed weights are no parameters)."""
    monkeypatch.setattr(load_module, "onednn_packs", lambda dtype, device: False)
    source = resolve_model(str(tiny_llama_dir))
    ops = get_ops(None, "cpu")
    model = load_model(source, torch.float32, ops, "cpu", "none")
    loaded = sum(p.numel() * p.element_size() for p in model.parameters())
    assert weight_bytes(load_config(source), torch.float32, ops) == loaded
