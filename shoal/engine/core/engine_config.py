"""The options of one engine, shared by the offline ``LLM``, the CLI and the HTTP server."""

from __future__ import annotations

from dataclasses import dataclass

from shoal.engine.hardware import DEVICES, QUANTIZATIONS

DTYPES = ("auto", "float32", "bfloat16", "float16")
UTILIZATION_FLAG = "--gpu-memory-utilization"


def check_utilization(value: float) -> None:
    """``ValueError`` naming the flag unless ``0 < value <= 1`` (a fraction of the card, as in vLLM)."""
    if not 0 < value <= 1:
        raise ValueError(f"gpu_memory_utilization ({UTILIZATION_FLAG}) must be in (0, 1], got {value}")


@dataclass
class EngineConfig:
    """How to build an engine.

    The KV budget is ``num_kv_blocks`` when given, else ``kv_cache_bytes`` divided by the size of one block,
    else on a GPU what ``gpu_memory_utilization`` of the card leaves after the weights and activations (vLLM's
    meaning), else on a CPU 512 MiB. ``max_model_len`` defaults to the model's context length, cut (with a warning) to what
    the KV cache holds; an explicit one the cache cannot hold is an error. Any admitted request can then always
    run alone (the scheduler relies on it); ``shoal.engine.core.kv_budget``.
    ``device``, ``dtype`` and ``quantization`` default to ``auto``: chosen for the hardware at start-up
    (``shoal.engine.hardware``), and logged with the reason. ``enable_lora`` gives the model ``max_loras`` adapter
    slots of rank up to ``max_lora_rank`` and loads ``lora_modules`` at start-up (docs/lora.md). On a GPU decode
    steps of up to ``max_cudagraph_capture_size`` sequences replay CUDA graphs captured at start-up unless
    ``enforce_eager`` (vLLM's names and meanings; ``shoal.engine.core.decode_graphs``); a CPU never uses them.
    ``weights_cache_dir``: where the converted weights are kept for the next start (``shoal.engine.loader.converted_cache``).
    """

    model: str
    dtype: str = "auto"
    block_size: int = 16
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    num_kv_blocks: int | None = None
    kv_cache_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    attention_backend: str | None = None
    seed: int = 0
    device: str = "auto"
    quantization: str = "auto"
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    lora_modules: tuple[tuple[str, str], ...] = ()  # (name, path) adapters loaded at start-up
    enforce_eager: bool = False
    max_cudagraph_capture_size: int = 512  # vLLM's default: decode batches above it run eagerly
    weights_cache_dir: str | None = None  # converted weights written once, mapped by later starts (none: off)

    def __post_init__(self) -> None:
        for name, allowed in (("dtype", DTYPES), ("device", DEVICES), ("quantization", QUANTIZATIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in (
            "block_size",
            "max_num_batched_tokens",
            "max_num_seqs",
            "max_loras",
            "max_lora_rank",
            "max_cudagraph_capture_size",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two (the kernels tile by it), got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes < 1:
            raise ValueError(f"kv_cache_bytes must be >= 1, got {self.kv_cache_bytes}")
        check_utilization(self.gpu_memory_utilization)
        if self.lora_modules and not self.enable_lora:
            raise ValueError("lora_modules needs enable_lora")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
