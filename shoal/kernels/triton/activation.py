"""SiLU-and-mul for the SwiGLU MLP: ``silu(x[..., :d]) * x[..., d:]``.

Grid ``(num_rows, cdiv(d, BLOCK))``: purely elementwise and bound by memory, so each program streams one
``BLOCK`` slice of a row's gate and up halves. SiLU runs in fp32 and is rounded to the input dtype before the
multiply, matching the two rounded torch operations of the reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, d, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < d
    gate = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride_x + d + offs, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype)
    tl.store(out_ptr + row * stride_out + offs, silu * up, mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """The SwiGLU activation over the last dimension (validated inputs)."""
    d = x.shape[-1] // 2
    rows = x.reshape(-1, 2 * d)
    out = torch.empty((rows.shape[0], d), dtype=x.dtype, device=x.device)
    if rows.shape[0] and d:
        block = min(BLOCK, triton.next_power_of_2(d))
        _silu_and_mul_kernel[(rows.shape[0], triton.cdiv(d, block))](
            rows, out, d, rows.stride(0), out.stride(0), BLOCK=block
        )
    return out.view(*x.shape[:-1], d)
