"""Grouped matmul of a mixture of experts: ``out[r] = rows[r] @ weight[e].T`` for the run of rows expert ``e`` got.

The rows arrive sorted by expert with each expert's row count known on the host (the MoE layer syncs it once),
so the host cuts every expert's run into tiles of ``BLOCK_M`` rows and lists, per tile, its expert and row range.
Grid ``(tiles, cdiv(N, BLOCK_N))``: a program multiplies one tile of one expert's rows by a ``BLOCK_N`` slice of
that expert's ``[N, K]`` weight, ``K`` in ``BLOCK_K`` steps on tensor cores into an fp32 accumulator, rounded
once to the output dtype. One launch serves every chosen expert, where the torch path issues a matmul per
expert. fp32 operands multiply in full fp32 (IEEE), not the TF32 a GPU would use by default; under the
interpreter bf16 operands go through fp32 (``launch.upcast_dots``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from shoal.kernels.triton.launch import fp32_dots, upcast_dots

BLOCK_M = 16  # rows per tile: a decode step gives an expert few rows, and tl.dot needs 16 at least
BLOCK_N = 64
BLOCK_K = 64


@triton.jit
def _grouped_matmul_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    tile_expert_ptr,
    tile_start_ptr,
    tile_end_ptr,
    N,
    K,
    stride_x,
    stride_we,
    stride_wn,
    stride_out,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
    FP32_DOTS: tl.constexpr,
):
    tile = tl.program_id(0)
    expert = tl.load(tile_expert_ptr + tile).to(tl.int64)
    end = tl.load(tile_end_ptr + tile)
    rows = tl.load(tile_start_ptr + tile) + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < end
    col_mask = cols < N
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    w_cols = w_ptr + expert * stride_we + cols.to(tl.int64)[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < K
        a = tl.load(x_rows + ks[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(w_cols + ks[:, None], mask=k_mask[:, None] & col_mask[None, :], other=0.0)  # [BLOCK_K, BLOCK_N]
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if FP32_DOTS:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    out = out_ptr + rows.to(tl.int64)[:, None] * stride_out + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


def tiles(counts: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(expert, first row, end row)`` of every ``BLOCK_M``-row tile of the experts' runs, as int32 tensors."""
    experts, starts, ends = [], [], []
    offset = 0
    for expert, count in enumerate(counts):
        for start in range(offset, offset + count, BLOCK_M):
            experts.append(expert)
            starts.append(start)
            ends.append(offset + count)
        offset += count
    table = torch.tensor([experts, starts, ends], dtype=torch.int32).to(device, non_blocking=True)
    return table[0], table[1], table[2]


def grouped_matmul(rows: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """``rows`` ``[R, K]`` sorted by expert, ``counts[e]`` of them expert ``e``'s, times ``weight`` ``[E, N, K]``
    (validated inputs); returns ``[R, N]`` in ``rows``' dtype."""
    _, n, k = weight.shape
    out = torch.empty((rows.shape[0], n), dtype=rows.dtype, device=rows.device)
    tile_expert, tile_start, tile_end = tiles(counts, rows.device)
    if tile_expert.numel() and n:
        _grouped_matmul_kernel[(tile_expert.numel(), triton.cdiv(n, BLOCK_N))](
            rows,
            weight,
            out,
            tile_expert,
            tile_start,
            tile_end,
            n,
            k,
            rows.stride(0),
            weight.stride(0),
            weight.stride(1),
            out.stride(0),
            BLOCK_M=BLOCK_M,
            BLOCK_N=BLOCK_N,
            BLOCK_K=BLOCK_K,
            UPCAST=upcast_dots(rows.dtype),
            FP32_DOTS=fp32_dots(rows.dtype),
        )
    return out
