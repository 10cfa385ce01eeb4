"""The model families (Llama's, Gemma's) and their paged KV cache."""

from shoal.engine.model.factory import Model, build_model
from shoal.engine.model.llama import CausalLM, allocate_kv_cache, kv_cache_bytes_per_block

__all__ = ["CausalLM", "Model", "allocate_kv_cache", "build_model", "kv_cache_bytes_per_block"]
