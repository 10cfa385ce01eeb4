"""Weight-only quantization at load: a GGUF file's own codes repacked for the CPU kernels, or new ones.

``Int4Codes`` is the Q4_1 form ``w = code * scale + low`` per group of 32 inputs (Q4_0 is the case
``low = -8 * scale``); ``Int8Codes`` is Q8_0, ``w = code * scale`` per group of 32. A GGUF tensor's codes are
read straight from its blocks, so the quantized model computes with exactly the file's weights. Where shoal's C
kernel serves (``shoal.kernels.cpu``: the default, see ``small_batch_kernel``), a Q4_0/Q4_1 projection becomes a
``q4_1`` layer and a Q8_0 one (SmolLM2's tied LM head, read from its embedding) a ``q8_0`` layer, in fp16
scales: the file's own bytes. On torch's kernels (the fallback) the Q4 codes are repacked for
``_weight_int4pack_mm_for_cpu`` with bf16 scales, and a projection the file keeps above 4 bits stays dense,
never fewer bits than the file gave it: requantized to int4, SmolLM2's LM head moved the logits 5x further from
the dequantized model's, and torch's int8 kernel took 21 ms per decode row on its 49152 x 576 matrix. For a
Hugging Face checkpoint every projection is quantized here, int4 with the min/max rule of llama.cpp's Q4_1.
Int8 (``--quantization int8``, torch's kernel) is symmetric, one scale per output row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from shoal.engine.loader.errors import WeightsError
from shoal.engine.model.quantized_linear import INT4_GROUP, QuantizedLinear
from shoal.kernels.cpu import QuantGemv, q4_1_layout, q8_0_layout
from shoal.kernels.cpu.quant_gemv import TILE

# Projections that get a quantized copy (the embedding table stays dense: it is gathered, not multiplied).
QUANTIZED_SUFFIXES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
# Batches of up to this many rows use the quantized weights, larger ones the dense: measured crossovers
# (docs/kernels.md). 8 where the dense projections are bf16 on oneDNN's AVX-512 / AMX path (and on torch's int4
# kernel); 16 where they are fp32 beside shoal's C kernel, whose calls past 8 rows go over each weight tile in
# passes (a CPU without native bf16: on an AMD EPYC with AVX2, 1.5-1.8x faster SmolLM2 steps at 9-12 rows than
# the oneDNN-packed fp32 weights, even at 16, behind from 24).
DEFAULT_MAX_ROWS = 8
FP32_MAX_ROWS = 16


def small_batch_rows(dtype: torch.dtype, kernel: QuantGemv | None) -> int:
    """The most rows a batch may have and still take the quantized weights (the crossover with the dense path)."""
    return FP32_MAX_ROWS if kernel is not None and dtype == torch.float32 else DEFAULT_MAX_ROWS


@dataclass(frozen=True)
class Int4Codes:
    codes: torch.Tensor  # uint8 [out, in], 0..15
    scales: torch.Tensor  # float32 [out, in // 32]
    lows: torch.Tensor  # float32 [out, in // 32]: the value of code 0

    def dequantize(self) -> torch.Tensor:
        out, cols = self.codes.shape
        grouped = self.codes.view(out, cols // INT4_GROUP, INT4_GROUP).float()
        return (grouped * self.scales[..., None] + self.lows[..., None]).view(out, cols)

    def map_rows(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Int4Codes:
        """The same row permutation applied to codes, scales and lows (undoing llama.cpp's Q/K interleave)."""
        return Int4Codes(fn(self.codes), fn(self.scales), fn(self.lows))

    @staticmethod
    def cat(parts: list[Int4Codes]) -> Int4Codes:
        return Int4Codes(*(torch.cat([getattr(p, f) for p in parts]) for f in ("codes", "scales", "lows")))


@dataclass(frozen=True)
class QuantizedLayout:
    """A quantized projection as its kernel reads it: what ``QuantizedLinear`` holds besides the dense layer (what
    the converted-weights cache keeps)."""

    kind: str
    packed: torch.Tensor
    scales: torch.Tensor


@dataclass(frozen=True)
class Int8Codes:
    codes: torch.Tensor  # int8 [out, in]
    scales: torch.Tensor  # float32 [out, in // 32]

    def dequantize(self) -> torch.Tensor:
        out, cols = self.codes.shape
        grouped = self.codes.view(out, cols // INT4_GROUP, INT4_GROUP).float()
        return (grouped * self.scales[..., None]).view(out, cols)


def int8_from_gguf_blocks(data: np.ndarray, shape: tuple[int, int]) -> Int8Codes:
    """Codes of a Q8_0 tensor from its raw blocks (per block: fp16 scale, 32 int8 codes)."""
    rows, cols = shape
    blocks = np.ascontiguousarray(data).reshape(rows, cols // INT4_GROUP, 2 + INT4_GROUP)
    scales = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    codes = blocks[..., 2:].copy().view(np.int8).reshape(rows, cols)
    return Int8Codes(torch.from_numpy(codes), torch.from_numpy(scales))


def int4_from_gguf_blocks(data: np.ndarray, type_name: str, shape: tuple[int, int]) -> Int4Codes:
    """Codes of a Q4_0 / Q4_1 tensor from its raw blocks (per block: fp16 scale, [fp16 min,] 16 bytes of nibbles;
    the low nibbles are the block's first 16 values, the high nibbles the next 16)."""
    rows, cols = shape
    header = {"Q4_0": 2, "Q4_1": 4}[type_name]
    blocks = np.ascontiguousarray(data).reshape(rows, cols // INT4_GROUP, header + 16)
    scales = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if type_name == "Q4_1":
        lows = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    else:
        lows = -8.0 * scales
    nibbles = blocks[..., header:]
    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).reshape(rows, cols)
    return Int4Codes(torch.from_numpy(codes), torch.from_numpy(scales), torch.from_numpy(lows))


def int4_from_dense(weight: torch.Tensor) -> Int4Codes:
    """Asymmetric 4-bit codes per group of 32 inputs: the group's minimum is code 0, its maximum code 15."""
    out, cols = weight.shape
    groups = weight.float().reshape(out, cols // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    scales = ((high - low) / 15).clamp(min=torch.finfo(torch.float32).tiny)
    codes = ((groups - low[..., None]) / scales[..., None]).round().clamp(0, 15).to(torch.uint8)
    return Int4Codes(codes.reshape(out, cols), scales, low)


def pack_int4(codes: Int4Codes, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's CPU layout: packed codes, and ``[in // 32, out, 2]`` (scale, zero) with the kernel's
    ``w = (code - 8) * scale + zero``, i.e. ``zero = low + 8 * scale``."""
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.codes.to(torch.int32), 1)
    scale_zero = torch.stack([codes.scales, codes.lows + 8 * codes.scales], dim=-1).transpose(0, 1)
    return packed, scale_zero.contiguous().to(dtype)


def pack_int8(weight: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row: ``w ~ code * scale`` with ``scale = max|w| / 127``."""
    weight = weight.float()
    scales = (weight.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
    codes = (weight / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
    return codes, scales.to(dtype)


def quantize_projections(
    model: nn.Module,
    kind: str,
    gguf_codes: dict[str, Int4Codes | Int8Codes] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    kernel: QuantGemv | None = None,
) -> list[str]:
    """Gives every projection of ``model`` a quantized copy, in place; returns the names of those whose codes
    came from the checkpoint. ``gguf_codes`` (a GGUF file's) maps a projection's weight name to the file's
    codes; with it, int4 mode leaves the projections it lacks dense. ``kernel``: shoal's C kernel, which then
    serves int4 mode (and the file's Q8_0 codes); torch's kernels without it."""
    from_file = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear) or not name.endswith(QUANTIZED_SUFFIXES):
            continue
        codes = (gguf_codes or {}).get(f"{name}.weight")
        layer = _quantized(name, module, kind, codes, gguf_codes is not None, max_rows, kernel)
        if layer is None:
            continue
        if codes is not None:
            from_file.append(name)
        _replace(model, name, layer)
    return from_file


def quantized_layouts(model: nn.Module) -> dict[str, QuantizedLayout]:
    """Every quantized projection's layout, by module name."""
    return {
        name: QuantizedLayout(module.kind, module.packed, module.scales)
        for name, module in model.named_modules()
        if isinstance(module, QuantizedLinear)
    }


def restore_quantized(
    model: nn.Module,
    layouts: dict[str, QuantizedLayout],
    kernel: QuantGemv | None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> None:
    """Makes the projections ``quantized_layouts`` named quantized again, from those layouts (no codes computed);
    ``ValueError`` where one names no plain projection or needs a kernel not given."""
    for name, layout in layouts.items():
        module = model.get_submodule(name)
        if type(module) is not nn.Linear:
            raise ValueError(f"{name} is a {type(module).__name__}, not a projection to quantize")
        _replace(model, name, QuantizedLinear(module, layout.kind, layout.packed, layout.scales, max_rows, kernel))


def _replace(model: nn.Module, name: str, layer: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, layer)


def _quantized(
    name: str,
    module: nn.Linear,
    kind: str,
    codes: Int4Codes | Int8Codes | None,
    from_gguf: bool,
    max_rows: int,
    kernel: QuantGemv | None,
) -> QuantizedLinear | None:
    """``module``'s quantized layer, or None where it stays dense."""
    weight = module.weight
    if kind == "int8":
        return QuantizedLinear(module, "int8", *pack_int8(weight, weight.dtype), max_rows)
    if isinstance(codes, Int8Codes):
        if kernel is None or weight.shape[0] % TILE:
            return None  # torch has no fast kernel for it, and it is never requantized to fewer bits
        return QuantizedLinear(module, "q8_0", *q8_0_layout(codes.codes, codes.scales), max_rows, kernel)
    if from_gguf and codes is None:
        return None
    if weight.shape[1] % INT4_GROUP or weight.shape[0] % 16:
        raise WeightsError(
            f"quantization='int4' (--quantization) needs each projection's input size to be a multiple of "
            f"{INT4_GROUP} and its output size one of 16; {name} is {weight.shape[1]} -> {weight.shape[0]}"
        )
    codes = codes if codes is not None else int4_from_dense(weight)
    if kernel is not None:
        return QuantizedLinear(module, "q4_1", *q4_1_layout(codes.codes, codes.scales, codes.lows), max_rows, kernel)
    return QuantizedLinear(module, "int4", *pack_int4(codes, weight.dtype), max_rows)
