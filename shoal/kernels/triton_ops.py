"""The Triton implementation of ``KernelOps``: validates on the host, then launches one kernel per op.

Attention picks its kernel per batch: a decode-only batch (every sequence has one new token) goes to the
paged decode kernel, split into KV segments when there are too few sequences to fill the GPU (by the length
it attends: a sliding window's, if shorter than the context); anything else (prefills, chunks, mixes with
decodes) goes to the prefill kernel, which handles decode rows too. Under the interpreter there is no GPU to
fill, so decode runs unsplit there. Both kernels mask a sliding window and soft-cap scores when asked. The split
count follows the metadata's ``max_seq_len``, an upper bound: a captured CUDA graph's says ``max_model_len``, which
fixes its count.
"""

from __future__ import annotations

import torch

from shoal.kernels import validation
from shoal.kernels.lora_metadata import LoRAMetadata
from shoal.kernels.metadata import AttentionMetadata
from shoal.kernels.triton import (
    add_rms_norm,
    choose_num_splits,
    grouped_matmul,
    lora_expand,
    lora_shrink,
    paged_decode_attention,
    paged_prefill_attention,
    rms_norm,
    rotary_embedding_,
    rotary_write_kv,
    silu_and_mul,
    write_kv_cache,
)
from shoal.kernels.triton.launch import check_device
from shoal.kernels.triton.lora import choose_split_k, shrink_column_tiles


def _num_sms(device: torch.device) -> int:
    """Streaming multiprocessors to fill; the interpreter runs one program at a time, so none there."""
    if device.type != "cuda":
        return 0
    return torch.cuda.get_device_properties(device).multi_processor_count


class TritonOps:
    """Triton kernels: compiled on CUDA tensors, interpreted on CPU under ``TRITON_INTERPRET=1``."""

    name = "triton"
    masks_sliding_window = True
    caps_attention_logits = True
    lora_by_token = True

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        validation.check_write_kv(key, value, k_cache, v_cache, slot_mapping)
        check_device(k_cache)
        write_kv_cache(key, value, k_cache, v_cache, slot_mapping)

    def attention(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        sliding_window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        validation.check_attention(query, k_cache, v_cache, meta)
        validation.check_window_and_cap(sliding_window, softcap)
        check_device(query)
        if meta.is_decode_only:
            attended = min(meta.max_seq_len, sliding_window or meta.max_seq_len)
            splits = choose_num_splits(meta.num_seqs, k_cache.shape[2], attended, _num_sms(query.device))
            return paged_decode_attention(
                query, k_cache, v_cache, meta.seq_lens, meta.block_tables, scale, splits, sliding_window, softcap
            )
        return paged_prefill_attention(
            query,
            k_cache,
            v_cache,
            meta.query_start_loc,
            meta.seq_lens,
            meta.block_tables,
            meta.max_query_len,
            scale,
            sliding_window,
            softcap,
        )

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        validation.check_rms_norm(x, weight)
        check_device(x)
        return rms_norm(x, weight, eps)

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        validation.check_rms_norm(x, weight, residual)
        check_device(x)
        return add_rms_norm(x, residual, weight, eps)

    def rotary(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        validation.check_rotary(positions, query, key, cos_sin_cache)
        check_device(query)
        return rotary_embedding_(positions, query, key, cos_sin_cache)

    def rotary_write_kv(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> torch.Tensor:
        validation.check_rotary(positions, query, key, cos_sin_cache)
        validation.check_write_kv(key, value, k_cache, v_cache, slot_mapping)
        check_device(query)
        return rotary_write_kv(positions, query, key, value, cos_sin_cache, k_cache, v_cache, slot_mapping)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        validation.check_silu_and_mul(x)
        check_device(x)
        return silu_and_mul(x)

    def grouped_matmul(self, rows: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> torch.Tensor:
        validation.check_grouped_matmul(rows, weight, counts)
        check_device(rows)
        return grouped_matmul(rows, weight, counts)

    def lora_shrink(self, x: torch.Tensor, a: torch.Tensor, meta: LoRAMetadata) -> torch.Tensor:
        validation.check_lora_shrink(x, a, meta)
        check_device(x)
        split_k = choose_split_k(meta, a.shape[0], shrink_column_tiles(a.shape[2]), _num_sms(x.device))
        return lora_shrink(x, a, meta, split_k)

    def lora_expand(
        self, y: torch.Tensor, t: torch.Tensor, b: torch.Tensor, meta: LoRAMetadata, part_sizes: tuple[int, ...]
    ) -> None:
        validation.check_lora_expand(y, t, b, meta, part_sizes)
        check_device(y)
        lora_expand(y, t, b, meta, part_sizes)
