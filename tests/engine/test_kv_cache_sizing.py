"""The KV budget: its arithmetic matches the tensors allocated, and it says (or refuses) what a request may be."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.devices import TEST_DEVICE

from shoal.engine import LLM
from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.core.kv_budget import DEFAULT_KV_CACHE_BYTES, kv_budget
from shoal.engine.model import allocate_kv_cache, kv_cache_bytes_per_block
from shoal.engine.model_config import ModelConfig

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
        f"kv cache {budget.num_blocks} blocks of 16 tokens = {budget.tokens} tokens, 512 MiB (the default 512 MiB; "
        f"--kv-cache-bytes / kvCacheMemory sets it); max_model_len 64: {budget.tokens // 64} requests of that "
        "length at once"
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


def test_the_engine_logs_its_budget_at_start_up(tiny_llama_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="shoal.engine.core.engine_core"):
        LLM(str(tiny_llama_dir), dtype="float32", num_kv_blocks=8, block_size=16, device=TEST_DEVICE)
    lines = [r.getMessage() for r in caplog.records if r.name == "shoal.engine.core.engine_core"]
    assert "kv cache 8 blocks of 16 tokens = 128 tokens" in lines[0] and "max_model_len 128" in lines[0]
    assert lines[1].startswith("max_model_len cut from the model's context length 256 to the 128 tokens")
