"""Weight-only quantization at load: GGUF's own 4-bit codes repacked for torch's int4 CPU kernel, or new ones.

``Int4Codes`` is the Q4_1 form ``w = code * scale + low`` per group of 32 inputs (Q4_0 is the case
``low = -8 * scale``). A GGUF Q4_0/Q4_1 tensor's codes are read straight from its blocks, so the int4 model
computes with exactly the file's weights (up to bf16 rounding of the scales). A GGUF projection the file keeps
at higher precision (SmolLM2's tied LM head is Q8_0) stays dense, never fewer bits than the file gave it:
requantized to int4, SmolLM2's LM head moved the logits 5x further from the dequantized model's, and torch's
int8 kernel took 21 ms per decode row on its 49152 x 576 matrix, several times the bf16 matmul. For a Hugging
Face checkpoint every projection is quantized here, int4 with the min/max rule of llama.cpp's Q4_1. Int8 is
symmetric, one scale per output row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from shoal.engine.loader.errors import WeightsError
from shoal.engine.model.quantized_linear import INT4_GROUP, QuantizedLinear

# Projections that get a quantized copy (the embedding table stays dense: it is gathered, not multiplied).
QUANTIZED_SUFFIXES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
# Batches of up to this many rows use the quantized weights; measured crossover on AVX-512/AMX, docs/kernels.md.
DEFAULT_MAX_ROWS = 8


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
    gguf_codes: dict[str, Int4Codes] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> list[str]:
    """Gives every projection of ``model`` a quantized copy, in place; returns the names of those whose int4
    codes came from the checkpoint. ``gguf_codes`` (a GGUF file's) maps a projection's weight name to the file's
    codes; with it, int4 mode leaves the projections it lacks dense."""
    from_file = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear) or not name.endswith(QUANTIZED_SUFFIXES):
            continue
        weight = module.weight
        codes = (gguf_codes or {}).get(f"{name}.weight")
        if kind == "int4" and gguf_codes is not None and codes is None:
            continue
        if kind == "int4":
            if weight.shape[1] % INT4_GROUP or weight.shape[0] % 16:
                raise WeightsError(
                    f"quantization='int4' (--quantization) needs each projection's input size to be a multiple of "
                    f"{INT4_GROUP} and its output size one of 16; {name} is {weight.shape[1]} -> {weight.shape[0]}"
                )
            if codes is None:
                codes = int4_from_dense(weight)
            else:
                from_file.append(name)
            packed, scales = pack_int4(codes, weight.dtype)
        else:
            packed, scales = pack_int8(weight, weight.dtype)
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, QuantizedLinear(module, kind, packed, scales, max_rows))
    return from_file
