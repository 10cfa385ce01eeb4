"""Every decoder layer of a small decode batch in one C call (``decode_layers.c``): its structs and its call.

The C file calls the other kernels' entry points (``quant_gemv``, ``layer_ops``, ``paged_attention``) through
function pointers, in the order and with the arguments the model's modules pass them, so it adds no arithmetic
of its own. What it takes away is the Python between those calls (5.3 of a SmolLM2 batch-1 step's 18 ms here).
This module knows the structs and nothing of the model: ``shoal.engine.model.decode_stack`` fills them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from shoal.kernels.cpu import layer_ops, paged_attention, quant_gemv
from shoal.kernels.cpu.build import NATIVE_FLAGS
from shoal.kernels.cpu.library import load_library

SOURCE = Path(__file__).with_name("decode_layers.c")
c_int, c_long, c_float, c_ptr = ctypes.c_int, ctypes.c_long, ctypes.c_float, ctypes.c_void_p
# the C source's OP_* order, and each op's kernel's reasons for a refusal
OPS = (
    ("input_layernorm", layer_ops.ERRORS),
    ("qkv_proj", quant_gemv.ERRORS),
    ("rotary_write_kv", layer_ops.ERRORS),
    ("attention", paged_attention.ERRORS),
    ("o_proj", quant_gemv.ERRORS),
    ("post_attention_layernorm", layer_ops.ERRORS),
    ("gate_up_proj", quant_gemv.ERRORS),
    ("silu_and_mul", layer_ops.ERRORS),
    ("down_proj", quant_gemv.ERRORS),
    ("q_norm/k_norm", layer_ops.ERRORS),
)


class Projection(ctypes.Structure):
    """A quantized projection in ``quant_gemv``'s layout: its kind, codes and scales."""

    _fields_ = [("kind", c_int), ("codes", c_ptr), ("scales", c_ptr)]


class Layer(ctypes.Structure):
    """One decoder layer's norm weights, projections, QKV bias and per-head norms (None: none), KV cache and sliding
    window (0: none)."""

    _fields_ = [
        ("input_norm", c_ptr),
        ("post_norm", c_ptr),
        ("qkv", Projection),
        ("o", Projection),
        ("gate_up", Projection),
        ("down", Projection),
        ("qkv_bias", c_ptr),
        ("q_norm", c_ptr),
        ("k_norm", c_ptr),
        ("k_cache", c_ptr),
        ("v_cache", c_ptr),
        ("window", c_int),
    ]


class Model(ctypes.Structure):
    """The kernels' entry points and the model's shape."""

    _fields_ = [
        *((name, c_ptr) for name in ("gemv", "rms_norm", "rotary", "silu", "attention")),
        *((name, c_int) for name in ("dtype", "hidden", "heads", "kv_heads", "head_dim", "intermediate")),
        ("num_blocks", c_int),
        ("block_size", c_int),
        ("eps", c_float),
        ("scale", c_float),
        ("softcap", c_float),
        ("cos_sin", c_ptr),
        ("cos_sin_dtype", c_int),
        ("rot", c_int),
        ("max_position", c_long),
    ]


class Step(ctypes.Structure):
    """One step's metadata and buffers; ``failed_layer`` and ``failed_op`` say where a call was refused."""

    _fields_ = [
        *((name, c_ptr) for name in ("positions", "slots", "block_tables", "seq_lens", "query_start")),
        *((name, c_int) for name in ("table_width", "num_seqs", "rows", "threads")),
        *((name, c_ptr) for name in ("x", "residual_a", "residual_b", "normed", "qkv", "attn", "o", "gate_up")),
        ("act", c_ptr),
        ("q", c_ptr),
        ("k", c_ptr),
        ("failed_layer", c_int),
        ("failed_op", c_int),
    ]


class DecodeLayers:
    """Calls into one loaded build of ``decode_layers.c``."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._call = library.shoal_decode_layers
        self._call.argtypes = (ctypes.POINTER(Model), ctypes.POINTER(Layer), c_int, ctypes.POINTER(Step), c_ptr)
        self._call.restype = c_int

    def __call__(self, model: Model, layers: ctypes.Array[Layer], step: Step) -> int:
        """Runs the layers; returns the address of the buffer holding the residual. A refused call raises
        ``ValueError`` naming the layer, the op and the kernel's reason."""
        residual = c_ptr()
        status = self._call(ctypes.byref(model), layers, len(layers), ctypes.byref(step), ctypes.byref(residual))
        if status:
            op, reasons = OPS[step.failed_op]
            raise ValueError(
                f"decoder layer {step.failed_layer}: {op}: the kernel refused the call ({reasons.get(status, status)})"
            )
        return residual.value or 0


@cache
def load_decode_layers(flags: Sequence[str] = NATIVE_FLAGS, cc: str | None = None) -> DecodeLayers:
    """Builds (once per machine, see ``build``) and loads the library; ``KernelUnavailable`` says why not."""
    return DecodeLayers(load_library(SOURCE, tuple(flags), cc))
