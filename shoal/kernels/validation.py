"""Checks run on the host before a kernel launch, so unsupported input fails with a clear message.

A Triton kernel cannot raise: given a shape it was not written for it reads the wrong memory. Every check here
looks only at shapes, dtypes, strides and host-side metadata (never at tensor contents, which would stall the
GPU), and raises ``ValueError`` naming the offending argument. The kernels add masks for what depends on
contents (slots, block ids, positions), so a bad value there reads nothing outside its tensor either.
"""

from __future__ import annotations

import torch

from shoal.kernels.lora_metadata import MAX_LORA_PARTS, LoRAMetadata
from shoal.kernels.metadata import AttentionMetadata

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)
MAX_HEAD_DIM = 256
INT32_MAX = 2**31 - 1


def _float(name: str, tensor: torch.Tensor) -> None:
    if tensor.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} dtype {tensor.dtype} is not supported: use float16, bfloat16 or float32")


def _index(name: str, tensor: torch.Tensor, dtypes: tuple[torch.dtype, ...] = INDEX_DTYPES) -> None:
    if tensor.dtype not in dtypes:
        raise ValueError(f"{name} dtype {tensor.dtype} is not supported: use {' or '.join(map(str, dtypes))}")


def _dims(name: str, tensor: torch.Tensor, ndim: int, layout: str) -> None:
    if tensor.dim() != ndim:
        raise ValueError(f"{name} must be {layout}, got shape {tuple(tensor.shape)}")


def _unit_last_stride(name: str, tensor: torch.Tensor) -> None:
    if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension, got strides {tensor.stride()}")


def _same_device(reference: torch.Tensor, **tensors: torch.Tensor) -> None:
    for name, tensor in tensors.items():
        if tensor.device != reference.device:
            raise ValueError(f"{name} is on {tensor.device}, expected {reference.device}")


def check_kv_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Both caches ``[num_blocks, block_size, num_kv_heads, head_dim]``, contiguous, same shape and dtype."""
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        _dims(name, cache, 4, "[num_blocks, block_size, num_kv_heads, head_dim]")
        _float(name, cache)
        if not cache.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {cache.stride()}")
    if v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype:
        raise ValueError(
            f"v_cache {tuple(v_cache.shape)} {v_cache.dtype} must match k_cache {tuple(k_cache.shape)} {k_cache.dtype}"
        )
    _same_device(k_cache, v_cache=v_cache)
    block_size, head_dim = k_cache.shape[1], k_cache.shape[3]
    if block_size < 1 or block_size & (block_size - 1):
        raise ValueError(f"block_size {block_size} (k_cache.shape[1]) must be a power of two")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim {head_dim} (k_cache.shape[3]) must be in [1, {MAX_HEAD_DIM}]")


def check_write_kv(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    check_kv_cache(k_cache, v_cache)
    for name, tensor in (("key", key), ("value", value)):
        _dims(name, tensor, 3, "[num_tokens, num_kv_heads, head_dim]")
        _float(name, tensor)
        _unit_last_stride(name, tensor)
        if tuple(tensor.shape[1:]) != tuple(k_cache.shape[2:]):
            raise ValueError(
                f"{name} heads x head_dim {tuple(tensor.shape[1:])} must match k_cache's {tuple(k_cache.shape[2:])}"
            )
    _dims("slot_mapping", slot_mapping, 1, "[num_tokens]")
    _index("slot_mapping", slot_mapping)
    if value.shape[0] != key.shape[0] or slot_mapping.shape[0] != key.shape[0]:
        raise ValueError(
            f"key, value and slot_mapping must have one row per token, got {key.shape[0]}, {value.shape[0]} "
            f"and {slot_mapping.shape[0]}"
        )
    _same_device(k_cache, key=key, value=value, slot_mapping=slot_mapping)


def check_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> None:
    check_kv_cache(k_cache, v_cache)
    _dims("query", query, 3, "[num_tokens, num_heads, head_dim]")
    _unit_last_stride("query", query)
    if query.dtype != k_cache.dtype:
        raise ValueError(f"query dtype {query.dtype} must match k_cache dtype {k_cache.dtype}")
    num_tokens, num_heads, head_dim = query.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if head_dim != k_cache.shape[3]:
        raise ValueError(f"query head_dim {head_dim} must match k_cache head_dim {k_cache.shape[3]}")
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    num_seqs = meta.num_seqs
    _dims("seq_lens", meta.seq_lens, 1, "[num_seqs]")
    _dims("query_start_loc", meta.query_start_loc, 1, "[num_seqs + 1]")
    _dims("block_tables", meta.block_tables, 2, "[num_seqs, max_blocks_per_seq]")
    for name in ("seq_lens", "query_start_loc", "block_tables"):
        _index(name, getattr(meta, name), (torch.int32,))
    _unit_last_stride("block_tables", meta.block_tables)
    if meta.query_start_loc.shape[0] != num_seqs + 1 or meta.block_tables.shape[0] != num_seqs:
        raise ValueError(
            f"query_start_loc ({meta.query_start_loc.shape[0]}) and block_tables ({meta.block_tables.shape[0]}) "
            f"must have num_seqs + 1 and num_seqs rows for {num_seqs} sequences"
        )
    if meta.max_query_len < (1 if num_seqs else 0) or meta.max_query_len > meta.max_seq_len:
        raise ValueError(f"max_query_len {meta.max_query_len} must be in [1, max_seq_len {meta.max_seq_len}]")
    if not num_seqs <= num_tokens <= num_seqs * meta.max_query_len:
        raise ValueError(
            f"query has {num_tokens} tokens, impossible for {num_seqs} sequences of at most "
            f"{meta.max_query_len} query tokens"
        )
    if meta.max_seq_len > meta.block_tables.shape[1] * block_size:
        raise ValueError(
            f"max_seq_len {meta.max_seq_len} does not fit block_tables' {meta.block_tables.shape[1]} blocks "
            f"of {block_size}"
        )
    _same_device(
        query,
        k_cache=k_cache,
        seq_lens=meta.seq_lens,
        query_start_loc=meta.query_start_loc,
        block_tables=meta.block_tables,
    )


def check_window_and_cap(sliding_window: int | None, softcap: float | None) -> None:
    """A window is a whole number of positions that fits the kernels' int32 arithmetic; a cap a finite positive
    number (it divides the scores)."""
    if sliding_window is not None:
        if isinstance(sliding_window, bool) or not isinstance(sliding_window, int):
            raise ValueError(f"sliding_window must be an int, got {sliding_window!r}")
        if not 1 <= sliding_window <= INT32_MAX:
            raise ValueError(f"sliding_window must be in [1, {INT32_MAX}], got {sliding_window}")
    number = isinstance(softcap, (int, float)) and not isinstance(softcap, bool)
    if softcap is not None and not (number and 0 < softcap < float("inf")):
        raise ValueError(f"softcap must be a finite positive number, got {softcap!r}")


def check_rms_norm(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> None:
    _float("x", x)
    _float("weight", weight)
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have a non-empty last (hidden) dimension, got shape {tuple(x.shape)}")
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"weight shape {tuple(weight.shape)} must be ({x.shape[-1]},), the hidden size of x")
    if not weight.is_contiguous():
        raise ValueError("weight must be contiguous")
    _unit_last_stride("x", x)
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError(
                f"residual {tuple(residual.shape)} {residual.dtype} must match x {tuple(x.shape)} {x.dtype}"
            )
        _unit_last_stride("residual", residual)
        _same_device(x, residual=residual)
    _same_device(x, weight=weight)


def check_rotary(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    _dims("positions", positions, 1, "[num_tokens]")
    _index("positions", positions)
    _dims("query", query, 3, "[num_tokens, num_heads, head_dim]")
    _dims("key", key, 3, "[num_tokens, num_kv_heads, head_dim]")
    _dims("cos_sin_cache", cos_sin_cache, 2, "[max_position, rotary_dim]")
    for name, tensor in (("query", query), ("key", key), ("cos_sin_cache", cos_sin_cache)):
        _float(name, tensor)
        _unit_last_stride(name, tensor)
    if not positions.shape[0] == query.shape[0] == key.shape[0]:
        raise ValueError(
            f"positions, query and key must have one row per token, got {positions.shape[0]}, {query.shape[0]} "
            f"and {key.shape[0]}"
        )
    if key.shape[2] != query.shape[2]:
        raise ValueError(f"key head_dim {key.shape[2]} must match query head_dim {query.shape[2]}")
    rotary_dim = cos_sin_cache.shape[1]
    if rotary_dim % 2 or not 2 <= rotary_dim <= query.shape[2]:
        raise ValueError(f"rotary_dim {rotary_dim} (cos_sin_cache.shape[1]) must be even and <= head_dim")
    _same_device(query, positions=positions, key=key, cos_sin_cache=cos_sin_cache)


def check_grouped_matmul(rows: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> None:
    _float("rows", rows)
    _dims("rows", rows, 2, "[rows, in]")
    _dims("weight", weight, 3, "[experts, out, in]")
    if weight.dtype != rows.dtype:
        raise ValueError(f"weight dtype {weight.dtype} must be rows' ({rows.dtype})")
    if weight.shape[2] != rows.shape[1]:
        raise ValueError(f"weight takes {weight.shape[2]} inputs per row, rows have {rows.shape[1]}")
    if len(counts) != weight.shape[0] or min(counts, default=0) < 0 or sum(counts) != rows.shape[0]:
        raise ValueError(
            f"counts must give each of the {weight.shape[0]} experts its number of rows, summing to "
            f"{rows.shape[0]}; got {len(counts)} counts summing to {sum(counts)}"
        )
    _unit_last_stride("rows", rows)
    _unit_last_stride("weight", weight)
    _same_device(rows, weight=weight)


def check_silu_and_mul(x: torch.Tensor) -> None:
    _float("x", x)
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(f"x's last dimension must hold gate and up halves of equal size, got {tuple(x.shape)}")
    _unit_last_stride("x", x)


def check_lora_shrink(x: torch.Tensor, a: torch.Tensor, meta: LoRAMetadata) -> None:
    _float("x", x)
    _dims("x", x, 2, "[tokens, in]")
    _dims("a", a, 3, "[in, slots, columns]")
    if a.dtype != x.dtype:
        raise ValueError(f"a dtype {a.dtype} must be x's ({x.dtype})")
    if a.shape[0] != x.shape[1]:
        raise ValueError(f"a takes {a.shape[0]} inputs per token, x has {x.shape[1]}")
    _check_lora_tokens(x.shape[0], a.shape[1], meta, "a.shape[1]")
    _unit_last_stride("x", x)
    _unit_last_stride("a", a)
    _same_device(x, a=a, token_slots=meta.token_slots)


def check_lora_expand(
    y: torch.Tensor, t: torch.Tensor, b: torch.Tensor, meta: LoRAMetadata, part_sizes: tuple[int, ...]
) -> None:
    _float("y", y)
    _dims("y", y, 2, "[tokens, out]")
    _dims("t", t, 2, "[tokens, columns]")
    _dims("b", b, 3, "[slots, columns, out]")
    if t.dtype != torch.float32:
        raise ValueError(f"t dtype {t.dtype} must be float32 (lora_shrink's output)")
    if b.dtype != y.dtype:
        raise ValueError(f"b dtype {b.dtype} must be y's ({y.dtype})")
    if t.shape[0] != y.shape[0] or t.shape[1] != b.shape[1]:
        raise ValueError(f"t {tuple(t.shape)} must be [{y.shape[0]} tokens, {b.shape[1]} columns of b]")
    if not 1 <= len(part_sizes) <= MAX_LORA_PARTS or b.shape[1] % len(part_sizes):
        raise ValueError(
            f"part_sizes must split the output in 1 to {MAX_LORA_PARTS} parts, each with an equal share of b's "
            f"{b.shape[1]} columns; got {len(part_sizes)}"
        )
    if min(part_sizes) < 0 or sum(part_sizes) != y.shape[1] or b.shape[2] != y.shape[1]:
        raise ValueError(f"part_sizes {part_sizes} and b's {b.shape[2]} outputs must add up to y's {y.shape[1]}")
    _check_lora_tokens(y.shape[0], b.shape[0], meta, "b.shape[0]")
    for name, tensor in (("y", y), ("t", t), ("b", b)):
        _unit_last_stride(name, tensor)
    _same_device(y, t=t, b=b, token_slots=meta.token_slots)


def _check_lora_tokens(num_tokens: int, num_slots: int, meta: LoRAMetadata, slots_name: str) -> None:
    if meta.num_tokens != num_tokens:
        raise ValueError(f"token_slots has {meta.num_tokens} tokens, the input {num_tokens}")
    if meta.num_slots != num_slots:
        raise ValueError(f"the LoRA metadata has {meta.num_slots} slots, {slots_name} {num_slots}")
