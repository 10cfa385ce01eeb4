"""A projection with weight-only int4 or int8 weights for small batches and the dense weight for large ones.

A decode step at low concurrency is memory-bound: each weight is read once for a handful of rows, so reading
4-bit weights (torch's ``_weight_int4pack_mm_for_cpu``, groups of 32 with a scale and a zero each) or 8-bit
ones (``_weight_int8pack_mm``, one scale per output row) instead of bf16 is what makes it fast. With many
rows the work is compute-bound, and there those CPU kernels run several times slower than a bf16 matmul on
AVX-512/AMX (see docs/kernels.md), so batches of more than ``max_rows`` rows use the dense weight, which the
model keeps anyway for prefill. The cost is the quantized copy's memory: a quarter (int4) or half (int8) of
the bf16 weights on top of them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

INT4_GROUP = 32
KINDS = ("int4", "int8")


class QuantizedLinear(nn.Module):
    """``nn.Linear``'s forward, through the quantized weight when the batch has at most ``max_rows`` rows."""

    def __init__(self, dense: nn.Linear, kind: str, packed: Tensor, scales: Tensor, max_rows: int) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        self.max_rows = max_rows
        self.weight = dense.weight
        self.bias = dense.bias
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales", scales, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[0] > self.max_rows:
            return nn.functional.linear(x, self.weight, self.bias)
        if self.kind == "int4":
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, INT4_GROUP, self.scales)
        else:
            out = torch.ops.aten._weight_int8pack_mm(x, self.packed, self.scales)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.kind}, in={self.weight.shape[1]}, out={self.weight.shape[0]}, max_rows={self.max_rows}"
