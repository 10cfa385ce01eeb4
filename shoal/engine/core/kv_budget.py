"""How big the KV cache is, how long a request may be, and the start-up line that says both.

The budget is ``num_kv_blocks`` when given, else ``kv_cache_bytes`` (512 MiB by default on any device) over one
block's bytes. ``max_model_len`` defaults to the model's context length, and a request alone must always fit
the cache: a default longer than the cache is cut to it, with a warning that names the option to raise it; an
explicit ``max_model_len`` the cache cannot hold is an error naming both numbers (vLLM's behaviour), never a
silent cut. Pure: the caller logs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.model import kv_cache_bytes_per_block
from shoal.engine.model_config import ModelConfig

DEFAULT_KV_CACHE_BYTES = 512 * 1024**2


@dataclass(frozen=True)
class KvBudget:
    num_blocks: int
    block_size: int
    bytes: int
    max_model_len: int
    source: str  # where the size came from, for the log line
    warning: str | None = None

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size

    def summary(self) -> str:
        """The start-up line: blocks, tokens, bytes, the longest request and how many of those run at once."""
        at_once = self.tokens // self.max_model_len
        return (
            f"kv cache {self.num_blocks} blocks of {self.block_size} tokens = {self.tokens} tokens, "
            f"{self.bytes / 2**20:.0f} MiB ({self.source}); max_model_len {self.max_model_len}: "
            f"{at_once} request{'s' if at_once != 1 else ''} of that length at once"
        )


def kv_budget(config: EngineConfig, model_config: ModelConfig, dtype: torch.dtype) -> KvBudget:
    """The cache's size and the request length it allows; ``ValueError`` naming the numbers when it cannot."""
    per_block = kv_cache_bytes_per_block(model_config, config.block_size, dtype)
    if config.num_kv_blocks:
        num_blocks, source = config.num_kv_blocks, "num_kv_blocks"
    elif config.kv_cache_bytes:
        num_blocks, source = max(config.kv_cache_bytes // per_block, 1), "--kv-cache-bytes"
    else:
        num_blocks = max(DEFAULT_KV_CACHE_BYTES // per_block, 1)
        source = "the default 512 MiB; --kv-cache-bytes / kvCacheMemory sets it"
    tokens = num_blocks * config.block_size
    context = model_config.max_position_embeddings
    if config.max_model_len is not None:
        if config.max_model_len > context:
            raise ValueError(
                f"max_model_len {config.max_model_len} exceeds the model's context length "
                f"(max_position_embeddings = {context})"
            )
        if config.max_model_len > tokens:
            raise ValueError(
                f"max_model_len {config.max_model_len} is longer than the KV cache holds ({tokens} tokens = "
                f"{num_blocks} blocks of {config.block_size}, from {source}): raise --kv-cache-bytes "
                f"(kvCacheMemory) or lower --max-model-len"
            )
        return KvBudget(num_blocks, config.block_size, num_blocks * per_block, config.max_model_len, source)
    warning = None
    length = context
    if context > tokens:
        length = tokens
        warning = (
            f"max_model_len cut from the model's context length {context} to the {tokens} tokens the KV cache "
            f"holds ({source}); raise --kv-cache-bytes (kvCacheMemory) for longer requests"
        )
    return KvBudget(num_blocks, config.block_size, num_blocks * per_block, length, source, warning)
