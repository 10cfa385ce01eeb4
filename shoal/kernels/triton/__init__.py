"""Triton kernels for the engine's hot path, one module per kernel; import after setting ``TRITON_INTERPRET``."""

from shoal.kernels.triton.activation import silu_and_mul
from shoal.kernels.triton.decode_attention import choose_num_splits, paged_decode_attention
from shoal.kernels.triton.grouped_matmul import grouped_matmul
from shoal.kernels.triton.kv_cache import write_kv_cache
from shoal.kernels.triton.lora import lora_expand, lora_shrink
from shoal.kernels.triton.prefill_attention import paged_prefill_attention
from shoal.kernels.triton.rms_norm import add_rms_norm, rms_norm
from shoal.kernels.triton.rotary import rotary_embedding_
from shoal.kernels.triton.rotary_kv_cache import rotary_write_kv

__all__ = [
    "add_rms_norm",
    "choose_num_splits",
    "grouped_matmul",
    "lora_expand",
    "lora_shrink",
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "rotary_embedding_",
    "rotary_write_kv",
    "silu_and_mul",
    "write_kv_cache",
]
