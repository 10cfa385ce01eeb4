"""RMSNorm, optionally with the residual add fused in front of it.

Grid ``(num_rows,)``: one program owns a whole row (the hidden size fits one tile, with more warps for wider
rows so each thread keeps a few dozen values), so the mean of squares is a single in-register reduction in fp32
and the row is read once. The fused variant adds the residual in the input dtype (as the unfused model would),
writes that sum for the next layer and normalises it, saving one full read and write of the hidden state per
norm. The normalised row is rounded to the input dtype before the weight multiplies it, as Hugging Face's
``LlamaRMSNorm`` does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.triton.launch import pow2


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    sum_ptr,
    eps,
    hidden,
    stride_x,
    stride_r,
    stride_out,
    stride_sum,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        x = x + tl.load(residual_ptr + row * stride_r + offs, mask=mask, other=0.0)
        tl.store(sum_ptr + row * stride_sum + offs, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / hidden + eps)
    normed = (xf * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(weight_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    hidden = x.shape[-1]
    rows = x.reshape(-1, hidden)
    out = torch.empty(rows.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if residual is None:
        res, total = rows, out
    else:
        res = residual.reshape(-1, hidden)
        total = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = pow2(hidden)
    if rows.shape[0]:
        _rms_norm_kernel[(rows.shape[0],)](
            rows,
            res,
            weight,
            out,
            total,
            eps,
            hidden,
            rows.stride(0),
            res.stride(0),
            out.stride(0),
            total.stride(0),
            HAS_RESIDUAL=residual is not None,
            BLOCK=block,
            num_warps=min(16, max(4, block // 512)),
        )
    return out.view(x.shape), total.view(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * (x / rms(x))`` over the last dimension (validated inputs)."""
    return _launch(x, None, weight, eps)[0]


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)`` in one pass (validated inputs)."""
    return _launch(x, residual, weight, eps)
