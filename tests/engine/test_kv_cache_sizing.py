"""The KV budget arithmetic matches the tensors actually allocated."""

from __future__ import annotations

import pytest
import torch

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
