"""Dense projections on weights oneDNN reordered once, at load, into its own blocked layout (fp32, and bf16 where
oneDNN computes it).

On a CPU, ``nn.functional.linear`` in bf16 hands oneDNN the plain ``[out, in]`` weight on every call, and oneDNN
reorders it into the blocked layout its AMX / AVX-512 BF16 kernels stream before multiplying: at 8-300 rows
that reorder was as long as the product (SmolLM2's projections at 64 rows, one thread: 1.7-1.8x faster packed,
the 49152-row LM head 2.0x; bit-identical results). In fp32 torch's linear is MKL's sgemm, which on an AMD CPU
(AVX2) ran SmolLM2's projections 1.2-3x slower than oneDNN on the packed weight at 8-256 rows (the LM head 2.9x at
9 rows); the two sum in their own orders, so fp32 results differ within rounding.
``torch.ops.mkldnn._reorder_linear_weight`` does the reorder once; ``_linear_pointwise`` then multiplies with the
reordered weight, which is what torch's own inductor emits for a frozen CPU model. The reordered weight is an
opaque oneDNN tensor, so it is no parameter (nothing else can read it): a projection keeps its plain weight only
where another module shares it (an LM head tied to the embedding).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

ROWS_HINT = 64  # oneDNN picks the blocking for this many rows; any row count works (measured 1 to 2048)


def onednn_bf16() -> bool:
    """Whether this CPU's oneDNN has a bf16 path (AVX-512 BW/VL/DQ or AVX-NE-CONVERT): on an AVX2-only CPU its
    reorder refuses bf16 weights, and ``nn.functional.linear`` runs bf16 emulated instead."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def onednn_packs(dtype: torch.dtype, device: torch.device | str) -> bool:
    """Whether dense projections of ``dtype`` on ``device`` get oneDNN-packed weights: on a CPU, fp32 always, bf16
    where its oneDNN computes bf16."""
    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and onednn_bf16())


def pack_weight(weight: Tensor) -> Tensor:
    """``weight`` ``[out, in]`` reordered for ``packed_linear`` (an opaque oneDNN tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)


def packed_linear(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """``nn.functional.linear(x, weight, bias)`` with ``packed = pack_weight(weight)``; ``x`` is ``[rows, in]``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(nn.Module):
    """``nn.Linear``'s forward on a packed weight; ``weight`` stays only when ``keep_weight`` (shared elsewhere)."""

    def __init__(self, dense: nn.Linear, keep_weight: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = dense.in_features, dense.out_features
        self.packed = pack_weight(dense.weight)
        self.bias = dense.bias
        if keep_weight:
            self.weight = dense.weight

    def forward(self, x: Tensor) -> Tensor:
        return packed_linear(x, self.packed, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, oneDNN-packed"
