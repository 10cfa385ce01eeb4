"""A projection with quantized weights for small batches and the dense weight for large ones.

A decode step at low concurrency is memory-bound: each weight is read once for a handful of rows, so reading
4-bit or 8-bit weights instead of bf16 is what makes it fast. Two families of kernels serve the small batches:

- ``q4_1`` / ``q8_0``: shoal's C kernel (``shoal.kernels.cpu``, llama.cpp's scheme): GGUF-style blocks of 32
  weights with fp16 scales, times activations quantized to int8 per block of 32, in integer dot products
  (VNNI / AVX2). The engine's default wherever the kernel builds; bf16 or fp32 activations.
- ``int4`` / ``int8``: torch's ``_weight_int4pack_mm_for_cpu`` (groups of 32 with a bf16 scale and zero each)
  and ``_weight_int8pack_mm`` (one scale per output row), bf16 activations only: the fallback where the C
  kernel cannot be built, and ``--quantization int8``.

With many rows the work is compute-bound, and there these kernels run several times slower than a bf16 matmul
on AVX-512/AMX (see docs/kernels.md), so batches of more than ``max_rows`` rows (the measured crossover,
``small_batch_rows``) use the dense weight, which the model keeps anyway for prefill. The cost is the quantized
copy's memory: a quarter (4-bit) or half (8-bit) of the bf16 weights on top of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor, nn

from shoal.engine.model.packed_linear import pack_weight, packed_linear
from shoal.kernels.cpu import QuantGemv

INT4_GROUP = 32
TORCH_KINDS = ("int4", "int8")
KERNEL_KINDS = ("q4_1", "q8_0")
KINDS = TORCH_KINDS + KERNEL_KINDS


class QuantizedLinear(nn.Module):
    """``nn.Linear``'s forward, through the quantized weight when the batch has at most ``max_rows`` rows.

    ``packed`` and ``scales`` are in the layout of ``kind``'s kernel (``pack_int4`` / ``pack_int8`` for torch's,
    ``q4_1_layout`` / ``q8_0_layout`` for ``kernel``); the C kinds need ``kernel``."""

    packed: Tensor
    scales: Tensor

    def __init__(
        self,
        dense: nn.Linear,
        kind: str,
        packed: Tensor,
        scales: Tensor,
        max_rows: int,
        kernel: QuantGemv | None = None,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if kind in KERNEL_KINDS and kernel is None:
            raise ValueError(f"kind {kind!r} runs on shoal's C kernel: pass the loaded kernel")
        if kernel is not None and max_rows > kernel.max_rows:
            raise ValueError(f"max_rows {max_rows} is more than the C kernel's {kernel.max_rows}")
        self.kind = kind
        self.max_rows = max_rows
        self.kernel = kernel
        self.in_features, self.out_features = dense.in_features, dense.out_features
        small: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {"int4": _torch_int4, "int8": _torch_int8}
        if kernel is not None:
            small.update(q4_1=kernel.q4_1, q8_0=kernel.q8_0)
        self._small = small[kind]
        self.weight: Tensor | None = dense.weight
        self.bias = dense.bias
        self._packed: Tensor | None = None
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales", scales, persistent=False)

    def pack_dense(self, keep_weight: bool = False) -> None:
        """Large batches multiply a oneDNN-packed copy of the dense weight (``packed_linear``), which replaces the
        plain one unless ``keep_weight`` (another module shares it)."""
        self._packed = pack_weight(cast(Tensor, self.weight))
        if not keep_weight:
            del self.weight
            self.weight = None

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[0] > self.max_rows:
            if self._packed is not None:
                return packed_linear(x, self._packed, self.bias)
            return nn.functional.linear(x, cast(Tensor, self.weight), self.bias)  # unpacked: the weight is kept
        out = self._small(x, self.packed, self.scales)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        dense = "oneDNN-packed" if self._packed is not None else "plain"
        return f"{self.kind}, in={self.in_features}, out={self.out_features}, max_rows={self.max_rows}, dense {dense}"


def _torch_int4(x: Tensor, packed: Tensor, scales: Tensor) -> Tensor:
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, INT4_GROUP, scales)


def _torch_int8(x: Tensor, packed: Tensor, scales: Tensor) -> Tensor:
    return torch.ops.aten._weight_int8pack_mm(x, packed, scales)
