"""The C kernel for attention over the paged KV cache on a CPU (``paged_attention.c``): its one call.

It takes the batch as ``AttentionMetadata`` describes it (decodes, prefill chunks and prefix-cache hits mixed,
no padding) and reads queries where the QKV projection left them and keys and values where the cache holds
them. fp32 or bf16 queries and cache; anything else is the torch path's (``CpuKernelOps`` falls back). ctypes
releases the GIL for the call; OpenMP runs it on ``torch.get_num_threads()`` threads, the count the
step-threads policy set for this step.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from shoal.kernels.cpu.build import NATIVE_FLAGS
from shoal.kernels.cpu.library import entry_point, load_library
from shoal.kernels.metadata import AttentionMetadata

SOURCE = Path(__file__).with_name("paged_attention.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1}
ERRORS = {
    1: "bad shape: a sequence's query or context length, or a block table naming a block outside the cache",
    2: "bad dtype",
    3: "out of memory for its scratch buffers",
}


class PagedAttention:
    """Calls into one loaded build of ``paged_attention.c``."""

    def __init__(self, library: ctypes.CDLL) -> None:
        library.shoal_attention_isa.restype = ctypes.c_char_p
        self.isa: str = library.shoal_attention_isa().decode()  # "avx512f(+avx512_bf16)", "avx2" or "portable C"
        self.max_head_dim: int = library.shoal_attention_max_head_dim()
        self._call = library.shoal_paged_attention
        self.address = entry_point(self._call)  # for shoal.kernels.cpu.decode_layers' table
        c_int, c_long, c_ptr = ctypes.c_int, ctypes.c_long, ctypes.c_void_p
        # q, its token and head strides, its dtype, k_cache, v_cache, their dtype, block_tables, its width, the
        # cache's blocks, seq_lens, query_start_loc, out, num_seqs, heads, kv_heads, head_dim, block_size, scale,
        # sliding window (0: none), soft cap (0: none), threads
        self._call.argtypes = (
            *(c_ptr, c_long, c_long, c_int, c_ptr, c_ptr, c_int, c_ptr, c_int, c_int, c_ptr, c_ptr, c_ptr),
            *(c_int, c_int, c_int, c_int, c_int, ctypes.c_float, c_int, ctypes.c_float, c_int),
        )
        self._call.restype = c_int
        self._checked: tuple[AttentionMetadata, int, Tensor, Tensor, Tensor] | None = None

    def metadata(self, meta: AttentionMetadata, tokens: int) -> tuple[Tensor, Tensor, Tensor]:
        """``meta``'s query starts, sequence lengths and block tables as int32, checked against the query rows
        once per forward pass: every layer passes the same ``meta`` (kept by identity, as ``TorchOps`` keeps its
        RoPE rows), so the conversions and the check's read of a value are not paid again by every layer."""
        kept = self._checked
        if kept is not None and kept[0] is meta and kept[1] == tokens:
            return kept[2], kept[3], kept[4]
        starts, seq_lens, tables = (_int32(t) for t in (meta.query_start_loc, meta.seq_lens, meta.block_tables))
        if int(starts[-1]) != tokens:
            raise ValueError(f"paged attention: the metadata describes {int(starts[-1])} query rows, got {tokens}")
        self._checked = (meta, tokens, starts, seq_lens, tables)
        return starts, seq_lens, tables

    def supports(self, query: Tensor, k_cache: Tensor) -> bool:
        """Whether these tensors' dtypes and head size are the kernel's (else the caller takes the torch path)."""
        return (
            query.dtype in DTYPES
            and k_cache.dtype in DTYPES
            and query.shape[-1] <= self.max_head_dim
            and query.is_cpu
            and k_cache.is_cpu
        )

    def __call__(
        self,
        query: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        meta: AttentionMetadata,
        scale: float,
        sliding_window: int | None = None,
        softcap: float | None = None,
    ) -> Tensor:
        """Causal attention of ``query`` ``[tokens, heads, head_dim]`` over each sequence's cached keys (its last
        ``sliding_window`` positions only, when given; scores soft-capped to ``tanh(s / softcap) * softcap``
        when that is)."""
        if sliding_window is not None and sliding_window < 1:
            raise ValueError(f"paged attention: sliding_window must be >= 1, got {sliding_window}")
        if softcap is not None and not softcap > 0:
            raise ValueError(f"paged attention: softcap must be positive, got {softcap}")
        tokens, heads, head_dim = query.shape
        num_blocks, block_size, kv_heads, cache_head_dim = k_cache.shape
        if v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype or cache_head_dim != head_dim:
            raise ValueError(
                f"paged attention: k_cache {list(k_cache.shape)} {k_cache.dtype}, v_cache {list(v_cache.shape)} "
                f"{v_cache.dtype} and query head size {head_dim} must agree"
            )
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()) or query.stride(2) != 1:
            raise ValueError("paged attention: the caches must be contiguous and each query head's row dense")
        if not self.supports(query, k_cache):
            raise ValueError(
                f"paged attention: {query.dtype} queries with a {k_cache.dtype} cache and head size {head_dim} on "
                f"{query.device} are not the kernel's (fp32/bf16 CPU tensors, head size <= {self.max_head_dim})"
            )
        starts, seq_lens, tables = self.metadata(meta, tokens)
        out = torch.empty(tokens, heads, head_dim, dtype=query.dtype)
        status = self._call(
            query.data_ptr(),
            query.stride(0),
            query.stride(1),
            DTYPES[query.dtype],
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            DTYPES[k_cache.dtype],
            tables.data_ptr(),
            tables.shape[1],
            num_blocks,
            seq_lens.data_ptr(),
            starts.data_ptr(),
            out.data_ptr(),
            seq_lens.shape[0],
            heads,
            kv_heads,
            head_dim,
            block_size,
            scale,
            sliding_window or 0,
            softcap or 0.0,
            torch.get_num_threads(),
        )
        if status:
            raise ValueError(f"paged attention: the kernel refused the call ({ERRORS.get(status, status)})")
        return out


def _int32(t: Tensor) -> Tensor:
    return t if t.dtype == torch.int32 and t.is_contiguous() else t.to(torch.int32).contiguous()


def load_paged_attention(flags: Sequence[str] = NATIVE_FLAGS, cc: str | None = None) -> PagedAttention:
    """Builds (once per machine) and loads the kernel; ``KernelUnavailable`` says why not."""
    return PagedAttention(load_library(SOURCE, flags, cc))
