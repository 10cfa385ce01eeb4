"""The C kernel for a decoder layer's small ops (``layer_ops.c``): RMSNorm with the residual add, RoPE with the
KV-cache write, SiLU-and-mul, each one call.

Each method takes what the torch path would and answers None when the tensors are not the kernel's (a dtype other
than fp32/bf16, mixed dtypes, rows that are not dense, a head wider than the kernel's scratch), so the caller
falls back to torch. ctypes releases the GIL for the call; OpenMP runs the larger calls on
``torch.get_num_threads()`` threads.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from shoal.kernels.cpu.build import NATIVE_FLAGS
from shoal.kernels.cpu.library import entry_point, load_library

SOURCE = Path(__file__).with_name("layer_ops.c")
# torch rounds a product before the sum: no fused multiply-add; no trapping math, so that a select before a
# division (exp's clamp in SiLU) vectorizes (it changes no result)
FLAGS = (*NATIVE_FLAGS, "-ffp-contract=off", "-fno-trapping-math")
DTYPES = {torch.float32: 0, torch.bfloat16: 1}
ERRORS = {
    1: "bad shape: a position outside the RoPE table, a slot outside the cache, or a head too wide",
    2: "bad dtype",
}


class LayerOps:
    """Calls into one loaded build of ``layer_ops.c``."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.max_head_dim: int = library.shoal_layer_ops_max_head_dim()
        c_int, c_long, c_ptr = ctypes.c_int, ctypes.c_long, ctypes.c_void_p
        self._rms_norm = library.shoal_rms_norm
        # x, its row stride, residual (or NULL), its row stride, weight, out, total (or NULL), dtype, rows,
        # width, eps, threads
        self._rms_norm.argtypes = (
            *(c_ptr, c_long, c_ptr, c_long, c_ptr, c_ptr, c_ptr),
            *(c_int, c_int, c_int, ctypes.c_float, c_int),
        )
        self._rotary = library.shoal_rotary_write_kv
        # positions, query and its token and head strides, key and its strides, value and its strides, dtype,
        # cos_sin, its dtype, its rows, rotary dim, k_cache, v_cache, slots, the caches' slots, tokens, heads,
        # kv heads, head_dim, threads
        self._rotary.argtypes = (
            *(c_ptr, c_ptr, c_long, c_long, c_ptr, c_long, c_long, c_ptr, c_long, c_long, c_int),
            *(c_ptr, c_int, c_long, c_int, c_ptr, c_ptr, c_ptr, c_long, c_int, c_int, c_int, c_int, c_int),
        )
        self._silu = library.shoal_silu_and_mul
        # x, its row stride, out, dtype, rows, width, threads
        self._silu.argtypes = (c_ptr, c_long, c_ptr, c_int, c_int, c_int, c_int)
        for call in (self._rms_norm, self._rotary, self._silu):
            call.restype = c_int
        # for shoal.kernels.cpu.decode_layers' table
        self.addresses = {
            name: entry_point(call)
            for name, call in (("rms_norm", self._rms_norm), ("rotary", self._rotary), ("silu", self._silu))
        }

    def rms_norm(
        self, x: Tensor, weight: Tensor, eps: float, residual: Tensor | None = None
    ) -> tuple[Tensor, Tensor] | None:
        """``(rms_norm(x + residual) * weight, x + residual)``; without a residual, ``(rms_norm(x) * weight, x)``.
        None when the tensors are not the kernel's."""
        dtype = DTYPES.get(x.dtype)
        if (
            dtype is None
            or x.dim() != 2
            or x.stride(1) != 1
            or not x.is_cpu
            or weight.dtype != x.dtype
            or weight.dim() != 1
            or not weight.is_contiguous()
            or weight.shape[0] != x.shape[1]
        ):
            return None
        rows, width = x.shape
        out = torch.empty(rows, width, dtype=x.dtype)
        if residual is None:
            total, r_ptr, r_stride, t_ptr = x, None, 0, None
        else:
            if residual.dtype != x.dtype or residual.shape != x.shape or residual.stride(1) != 1:
                return None
            total = torch.empty(rows, width, dtype=x.dtype)
            r_ptr, r_stride, t_ptr = residual.data_ptr(), residual.stride(0), total.data_ptr()
        status = self._rms_norm(
            x.data_ptr(),
            x.stride(0),
            r_ptr,
            r_stride,
            weight.data_ptr(),
            out.data_ptr(),
            t_ptr,
            dtype,
            rows,
            width,
            eps,
            torch.get_num_threads(),
        )
        _check("rms_norm", status)
        return out, total

    def rotary_write_kv(
        self,
        positions: Tensor,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        cos_sin_cache: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        slot_mapping: Tensor,
    ) -> Tensor | None:
        """Rotates ``query`` in place and returns it; writes the rotated keys and the values to their slots (``key``
        is left as it was). None when the tensors are not the kernel's."""
        dtype = DTYPES.get(query.dtype)
        tokens, heads, head_dim = query.shape
        if (
            dtype is None
            or not query.is_cpu
            or key.dtype != query.dtype
            or value.dtype != query.dtype
            or k_cache.dtype != query.dtype
            or v_cache.dtype != query.dtype
            or query.stride(2) != 1
            or key.stride(2) != 1
            or value.stride(2) != 1
            or key.shape[0] != tokens
            or value.shape != key.shape
            or positions.shape != (tokens,)
            or slot_mapping.shape != (tokens,)
            or not (k_cache.is_contiguous() and v_cache.is_contiguous())
            or v_cache.shape != k_cache.shape
            or k_cache.shape[2:] != key.shape[1:]
            or head_dim > self.max_head_dim
            or cos_sin_cache.dtype not in DTYPES
            or not cos_sin_cache.is_contiguous()
            or positions.dtype != torch.int64
            or slot_mapping.dtype != torch.int64
            or not (positions.is_contiguous() and slot_mapping.is_contiguous())
        ):
            return None
        status = self._rotary(
            positions.data_ptr(),
            query.data_ptr(),
            query.stride(0),
            query.stride(1),
            key.data_ptr(),
            key.stride(0),
            key.stride(1),
            value.data_ptr(),
            value.stride(0),
            value.stride(1),
            dtype,
            cos_sin_cache.data_ptr(),
            DTYPES[cos_sin_cache.dtype],
            cos_sin_cache.shape[0],
            cos_sin_cache.shape[1],
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            slot_mapping.data_ptr(),
            k_cache.shape[0] * k_cache.shape[1],
            tokens,
            heads,
            key.shape[1],
            head_dim,
            torch.get_num_threads(),
        )
        _check("rotary_write_kv", status)
        return query

    def silu_and_mul(self, x: Tensor) -> Tensor | None:
        """``silu(x[:, :d]) * x[:, d:]``, or None when ``x`` is not the kernel's."""
        dtype = DTYPES.get(x.dtype)
        if dtype is None or x.dim() != 2 or x.stride(1) != 1 or x.shape[1] % 2 or not x.is_cpu:
            return None
        rows, width = x.shape[0], x.shape[1] // 2
        out = torch.empty(rows, width, dtype=x.dtype)
        status = self._silu(x.data_ptr(), x.stride(0), out.data_ptr(), dtype, rows, width, torch.get_num_threads())
        _check("silu_and_mul", status)
        return out


def _check(name: str, status: int) -> None:
    if status:
        raise ValueError(f"{name}: the kernel refused the call ({ERRORS.get(status, status)})")


def load_layer_ops(flags: Sequence[str] = FLAGS, cc: str | None = None) -> LayerOps:
    """Builds (once per machine, see ``build``) and loads the kernel; ``KernelUnavailable`` says why not."""
    return LayerOps(load_library(SOURCE, flags, cc))
