"""A ``CausalLM``'s decoder layers as one C call for the batches its quantized projections take.

At a SmolLM2 batch-1 decode step the C kernels worked 12.7 ms and Python spent 5.3 ms between their 283 calls
(module calls, each kernel wrapper's checks, output allocations, ctypes conversions). ``DecodeStack`` checks
once, at bind time, that every layer is what ``shoal.kernels.cpu.decode_layers`` runs (a dense MLP, a bias on
Q/K/V only (Qwen2), per-head Q/K norms or none (Qwen3), every projection on shoal's C kernel, the C attention and
layer ops), fills its
tables once per KV cache, and per step passes the metadata and preallocated buffers in one struct. The kernels
are called as the modules call them, so the step's tokens are the module path's to the bit; a batch with more
rows than the quantized projections take (``max_rows``), or anything unexpected, goes down the module path.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from shoal.engine.model.llama import MLP, Attention, CausalLM, DecoderLayer
from shoal.engine.model.quantized_linear import QuantizedLinear
from shoal.kernels import AttentionMetadata
from shoal.kernels.cpu.decode_layers import DecodeLayers, Layer, Model, Projection, Step, load_decode_layers
from shoal.kernels.cpu.layer_ops import DTYPES
from shoal.kernels.cpu.library import KernelUnavailable
from shoal.kernels.cpu.quant_gemv import Q4_1, Q8_0, QuantGemv
from shoal.kernels.cpu_ops import CpuOps

log = logging.getLogger(__name__)

KINDS = {"q4_1": Q4_1, "q8_0": Q8_0}
KVCache = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class LayerParts:
    """What the C layer reads of one decoder layer."""

    input_norm: Tensor
    post_norm: Tensor
    qkv: QuantizedLinear
    o: QuantizedLinear
    gate_up: QuantizedLinear
    down: QuantizedLinear
    window: int  # 0: none
    qkv_bias: Tensor | None = None
    q_norm: Tensor | None = None  # per-head norms' weights (Qwen3), with k_norm
    k_norm: Tensor | None = None


@dataclass(frozen=True)
class Shape:
    """The model's shape as the C layer needs it."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    scale: float
    softcap: float  # 0: none


class DecodeStack:
    """Runs a model's decoder layers in one call; built by ``bind`` where the model qualifies."""

    def __init__(
        self,
        layers: list[LayerParts],
        shape: Shape,
        cos_sin: Tensor,
        ops: CpuOps,
        gemv: QuantGemv,
        library: DecodeLayers,
        max_rows: int,
    ) -> None:
        self._library = library
        self._attention = ops.kernel
        self._parts = layers
        self.max_rows = max_rows
        self.dtype = layers[0].input_norm.dtype
        self._model = Model(
            gemv=gemv.address,
            rms_norm=ops.layer_ops.addresses["rms_norm"],
            rotary=ops.layer_ops.addresses["rotary"],
            silu=ops.layer_ops.addresses["silu"],
            attention=ops.kernel.address,
            dtype=DTYPES[self.dtype],
            hidden=shape.hidden,
            heads=shape.heads,
            kv_heads=shape.kv_heads,
            head_dim=shape.head_dim,
            intermediate=shape.intermediate,
            eps=shape.eps,
            scale=shape.scale,
            softcap=shape.softcap,
            cos_sin=cos_sin.data_ptr(),
            cos_sin_dtype=DTYPES[cos_sin.dtype],
            rot=cos_sin.shape[1],
            max_position=cos_sin.shape[0],
        )
        self._cos_sin = cos_sin  # kept alive with the table that points at it
        self._caches: list[KVCache] | None = None
        self._layers: ctypes.Array[Layer] | None = None
        q_size, kv_size = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        self._buffers = {
            name: torch.empty(max_rows, size, dtype=self.dtype)
            for name, size in (
                ("residual_a", shape.hidden),
                ("residual_b", shape.hidden),
                ("normed", shape.hidden),
                ("qkv", q_size + 2 * kv_size),
                ("attn", q_size),
                ("o", shape.hidden),
                ("gate_up", 2 * shape.intermediate),
                ("act", shape.intermediate),
                ("q", q_size),
                ("k", kv_size),
            )
        }
        self._step = Step(**{name: t.data_ptr() for name, t in self._buffers.items()})

    def _bind_caches(self, kv_caches: list[KVCache]) -> ctypes.Array[Layer]:
        """The layers' table for these caches (built once per cache list: its tensors do not move)."""
        if self._caches is kv_caches and self._layers is not None:
            return self._layers
        k0 = kv_caches[0][0]
        for k_cache, v_cache in kv_caches:
            if k_cache.dtype != self.dtype or v_cache.dtype != self.dtype or k_cache.device.type != "cpu":
                raise ValueError(f"decode stack: {k_cache.dtype} KV caches on {k_cache.device}, not {self.dtype} CPU")
            if (
                not (k_cache.is_contiguous() and v_cache.is_contiguous())
                or not k0.shape == k_cache.shape == v_cache.shape
            ):
                raise ValueError("decode stack: the KV caches must be contiguous and of one shape")
        self._model.num_blocks, self._model.block_size = k0.shape[0], k0.shape[1]
        rows = [
            Layer(
                input_norm=part.input_norm.data_ptr(),
                post_norm=part.post_norm.data_ptr(),
                qkv=_projection(part.qkv),
                o=_projection(part.o),
                gate_up=_projection(part.gate_up),
                down=_projection(part.down),
                qkv_bias=_address(part.qkv_bias),
                q_norm=_address(part.q_norm),
                k_norm=_address(part.k_norm),
                k_cache=k_cache.data_ptr(),
                v_cache=v_cache.data_ptr(),
                window=part.window,
            )
            for part, (k_cache, v_cache) in zip(self._parts, kv_caches, strict=True)
        ]
        self._layers = (Layer * len(rows))(*rows)
        self._caches = kv_caches
        return self._layers

    def __call__(
        self, positions: Tensor, hidden: Tensor, kv_caches: list[KVCache], meta: AttentionMetadata
    ) -> tuple[Tensor, Tensor] | None:
        """``(hidden, residual)`` after the last layer, as the module loop leaves them; None when this batch is the
        module path's (more rows than the quantized kernel takes, or tensors not of the kernel's kinds). The
        residual is a buffer the next call overwrites."""
        rows = hidden.shape[0]
        slots = meta.slot_mapping
        if (
            not 1 <= rows <= self.max_rows
            or hidden.dtype != self.dtype
            or not hidden.is_contiguous()
            or positions.dtype != torch.int64
            or slots.dtype != torch.int64
            or not (positions.is_contiguous() and slots.is_contiguous())
            or positions.shape != (rows,)
            or slots.shape != (rows,)
        ):
            return None
        layers = self._bind_caches(kv_caches)
        starts, seq_lens, tables = self._attention.metadata(meta, rows)
        step = self._step
        step.positions, step.slots = positions.data_ptr(), slots.data_ptr()
        step.block_tables, step.table_width = tables.data_ptr(), tables.shape[1]
        step.seq_lens, step.query_start, step.num_seqs = seq_lens.data_ptr(), starts.data_ptr(), seq_lens.shape[0]
        step.rows, step.threads, step.x = rows, torch.get_num_threads(), hidden.data_ptr()
        residual = self._library(self._model, layers, step)
        a = self._buffers["residual_a"]
        return hidden, (a if residual == a.data_ptr() else self._buffers["residual_b"])[:rows]


def bind(model: CausalLM) -> DecodeStack | None:
    """A ``DecodeStack`` for ``model`` where every layer qualifies (logged once), else None."""
    if not isinstance(ops := model.norm.ops, CpuOps):
        return None
    parts: list[LayerParts] = []
    for layer in model.layers:
        assert isinstance(layer, DecoderLayer)
        attn, mlp = layer.self_attn, layer.mlp
        assert isinstance(attn, Attention)
        if not isinstance(mlp, MLP) or (attn.q_norm is None) != (attn.k_norm is None):
            return None
        qkv = _quantized(attn.qkv_proj, bias_allowed=True)
        o, gate_up, down = (_quantized(p) for p in (attn.o_proj, mlp.gate_up_proj, mlp.down_proj))
        if qkv is None or o is None or gate_up is None or down is None:
            return None
        input_norm, post_norm = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        q_norm, k_norm = (n.weight if n is not None else None for n in (attn.q_norm, attn.k_norm))
        if any(n is not None and n.eps != model.norm.eps for n in (attn.q_norm, attn.k_norm)):
            return None
        window = attn.sliding_window or 0
        parts.append(LayerParts(input_norm, post_norm, qkv, o, gate_up, down, window, qkv.bias, q_norm, k_norm))
    first = model.layers[0].self_attn
    assert isinstance(first, Attention)
    dtype, cos_sin = model.norm.weight.dtype, model.cos_sin_cache
    kernels = {id(q.kernel) for part in parts for q in (part.qkv, part.o, part.gate_up, part.down)}
    weights = [
        w
        for part in parts
        for w in (part.input_norm, part.post_norm, part.qkv_bias, part.q_norm, part.k_norm)
        if w is not None
    ]
    if (
        dtype not in DTYPES
        or len(kernels) != 1
        or any(w.dtype != dtype or not w.is_contiguous() or w.device.type != "cpu" for w in weights)
        or cos_sin.dtype not in DTYPES
        or not cos_sin.is_contiguous()
        or first.head_dim > min(ops.kernel.max_head_dim, ops.layer_ops.max_head_dim)
    ):
        return None
    gemv = parts[0].qkv.kernel
    assert gemv is not None  # the C kinds carry their kernel
    try:
        library = load_decode_layers()
    except KernelUnavailable as exc:
        log.warning("decode steps: one call per op (the one-call layers are unavailable: %s)", exc)
        return None
    config = model.config
    shape = Shape(
        hidden=config.hidden_size,
        heads=first.num_heads,
        kv_heads=first.num_kv_heads,
        head_dim=first.head_dim,
        intermediate=config.intermediate_size,
        eps=model.norm.eps,
        scale=first.scale,
        softcap=first.softcap or 0.0,
    )
    max_rows = min(q.max_rows for part in parts for q in (part.qkv, part.o, part.gate_up, part.down))
    stack = DecodeStack(parts, shape, cos_sin, ops, gemv, library, max_rows)
    log.info("decode steps of up to %d rows: every decoder layer in one C call", max_rows)
    return stack


def _quantized(module: torch.nn.Module, bias_allowed: bool = False) -> QuantizedLinear | None:
    """``module`` where it is a projection on shoal's C kernel (with no bias unless ``bias_allowed``)."""
    if isinstance(module, QuantizedLinear) and module.kind in KINDS and (bias_allowed or module.bias is None):
        return module
    return None


def _address(tensor: Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


def _projection(module: QuantizedLinear) -> Projection:
    return Projection(kind=KINDS[module.kind], codes=module.packed.data_ptr(), scales=module.scales.data_ptr())
