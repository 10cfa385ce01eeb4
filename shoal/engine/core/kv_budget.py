"""How big the KV cache is, how long a request may be, and the start-up line that says both.

The budget, first rule that applies:

1. ``num_kv_blocks`` (blocks) or ``kv_cache_bytes`` (``--kv-cache-bytes``, ``kvCacheMemory``): explicit overrides.
2. On a GPU, what ``gpu_memory_utilization`` leaves (vLLM's law)::

       kv bytes = total * gpu_memory_utilization - (weights + peak activations + non-torch memory)

   the peak measured by a profiling forward at ``max_num_batched_tokens`` after the weights load (``CardMemory``,
   gathered by ``shoal.engine.core.gpu_memory``). As in vLLM, the fraction must have been free at start-up:
   memory other processes hold is not taken from them.
3. On a CPU, 512 MiB (``DEFAULT_KV_CACHE_BYTES``): host memory is shared with everything else on the machine,
   so the engine takes a fixed, documented amount rather than a fraction.

``max_model_len`` defaults to the model's context length, and a request alone must always fit the cache: a
default longer than the cache is cut to it, with a warning that names the option to raise it; an explicit
``max_model_len`` the cache cannot hold is an error naming both numbers (vLLM's behaviour), never a silent cut.
Pure: the caller measures and logs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shoal.engine.core.engine_config import UTILIZATION_FLAG, EngineConfig, check_utilization
from shoal.engine.model import kv_cache_bytes_per_block
from shoal.engine.model_config import ModelConfig

DEFAULT_KV_CACHE_BYTES = 512 * 1024**2


@dataclass(frozen=True)
class CardMemory:
    """A GPU's memory in bytes, measured after the weights loaded and the profiling forward ran."""

    total: int
    free: int  # before the weights loaded: what other processes leave
    weights: int
    activations: int  # peak torch memory of the profiling forward beyond the weights
    non_torch: int  # what the process holds outside torch's allocator (CUDA context, NCCL, ...)

    def summary(self) -> str:
        return (
            f"{gib(self.total)} card: weights {gib(self.weights)}, activations {gib(self.activations)}, "
            f"non-torch {gib(self.non_torch)}"
        )


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


def gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.2f} GiB"


def check_weights_fit(weights: int, free: int) -> None:
    """Before loading: a model whose weights exceed the GPU's free memory is refused with both sizes."""
    if weights > free:
        raise ValueError(
            f"the model does not fit the GPU: its weights take {gib(weights)} but the GPU has {gib(free)} free; "
            "use a smaller model, a larger GPU, or --device cpu"
        )


def card_kv_bytes(utilization: float, card: CardMemory) -> int:
    """The KV cache's bytes on a GPU (rule 2); ``ValueError`` naming the numbers when nothing is left."""
    check_utilization(utilization)
    allowed = int(card.total * utilization)
    if allowed > card.free:
        raise ValueError(
            f"{UTILIZATION_FLAG} {utilization} asks for {gib(allowed)} of the {gib(card.total)} GPU, but only "
            f"{gib(card.free)} was free at start-up (other processes hold the rest): lower {UTILIZATION_FLAG} "
            "or free the GPU"
        )
    used = card.weights + card.activations + card.non_torch
    if allowed <= used:
        raise ValueError(
            f"{UTILIZATION_FLAG} {utilization} allows {gib(allowed)} of the {card.summary()}: "
            f"{gib(used)} is taken before any KV cache; raise {UTILIZATION_FLAG} or lower --max-num-batched-tokens"
        )
    return allowed - used


def kv_budget(
    config: EngineConfig, model_config: ModelConfig, dtype: torch.dtype, card: CardMemory | None = None
) -> KvBudget:
    """The cache's size and the request length it allows; ``card`` is the GPU's measured memory (None on a
    CPU). ``ValueError`` naming the numbers when it cannot."""
    per_block = kv_cache_bytes_per_block(model_config, config.block_size, dtype)
    remedy = "raise --kv-cache-bytes (kvCacheMemory)"
    if config.num_kv_blocks:
        num_blocks, source = config.num_kv_blocks, "num_kv_blocks"
    elif config.kv_cache_bytes:
        num_blocks, source = max(config.kv_cache_bytes // per_block, 1), "--kv-cache-bytes"
    elif card is not None:
        available = card_kv_bytes(config.gpu_memory_utilization, card)
        num_blocks = available // per_block
        utilization = f"{UTILIZATION_FLAG} {config.gpu_memory_utilization}"
        source = f"{utilization} of the {card.summary()}"
        remedy = f"raise {UTILIZATION_FLAG} (gpuMemoryUtilization)"
        if num_blocks < 1:
            raise ValueError(
                f"{utilization} leaves {gib(available)} for the KV cache, less than one block "
                f"({per_block} bytes); {remedy}"
            )
    else:
        num_blocks = max(DEFAULT_KV_CACHE_BYTES // per_block, 1)
        source = "the default 512 MiB on a CPU, where --gpu-memory-utilization has no effect; --kv-cache-bytes sets it"
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
                f"{num_blocks} blocks of {config.block_size}, from {source}): {remedy} or lower --max-model-len"
            )
        return KvBudget(num_blocks, config.block_size, num_blocks * per_block, config.max_model_len, source)
    warning = None
    length = context
    if context > tokens:
        length = tokens
        warning = (
            f"max_model_len cut from the model's context length {context} to the {tokens} tokens the KV cache "
            f"holds ({source}); {remedy} for longer requests"
        )
    return KvBudget(num_blocks, config.block_size, num_blocks * per_block, length, source, warning)
