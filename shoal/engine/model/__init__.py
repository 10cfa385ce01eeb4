"""The Llama-family model and its paged KV cache."""

from shoal.engine.model.llama import CausalLM, allocate_kv_cache, kv_cache_bytes_per_block

__all__ = ["CausalLM", "allocate_kv_cache", "kv_cache_bytes_per_block"]
