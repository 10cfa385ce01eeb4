"""The CPU path of ``KernelOps``: shoal's C kernels for attention and a layer's small ops, torch for the rest.

``TorchOps.attention`` gathers each sequence's blocks, pads them to the longest and masks, which sends SDPA down
its slow masked path: on a 64-stream decode step that was half the step on an AMD EPYC. The C kernel
(``shoal.kernels.cpu.paged_attention``) reads the blocks in place, one pass per sequence and KV head for every
query head sharing it, with no padding, for decodes and prefill chunks alike. RMSNorm (with its residual add),
RoPE with the KV-cache write, and SiLU-and-mul are one C call each (``shoal.kernels.cpu.layer_ops``) where torch
dispatches five to ten small ops: at a batch-1 decode step those dispatches, not the arithmetic, were the cost.
Tensors the kernels do not take (fp16, mixed dtypes, rows that are not dense) keep the torch path.
"""

from __future__ import annotations

import torch

from shoal.kernels.cpu.layer_ops import LayerOps
from shoal.kernels.cpu.paged_attention import PagedAttention
from shoal.kernels.metadata import AttentionMetadata
from shoal.kernels.torch_ops import TorchOps


class CpuOps(TorchOps):
    """The C kernels for attention, norms, RoPE with the KV write and SiLU-and-mul; torch for the rest."""

    name = "cpu"

    def __init__(self, kernel: PagedAttention, layer_ops: LayerOps) -> None:
        super().__init__()
        self.kernel = kernel
        self.layer_ops = layer_ops

    def attention(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        sliding_window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        if not self.kernel.supports(query, k_cache):
            return super().attention(query, k_cache, v_cache, meta, scale, sliding_window, softcap)
        return self.kernel(query, k_cache, v_cache, meta, scale, sliding_window, softcap)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        done = self.layer_ops.rms_norm(x, weight, eps)
        return super().rms_norm(x, weight, eps) if done is None else done[0]

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        done = self.layer_ops.rms_norm(x, weight, eps, residual)
        return super().add_rms_norm(x, residual, weight, eps) if done is None else done

    def rotary_write_kv(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> torch.Tensor:
        done = self.layer_ops.rotary_write_kv(
            positions, query, key, value, cos_sin_cache, k_cache, v_cache, slot_mapping
        )
        if done is None:
            return super().rotary_write_kv(positions, query, key, value, cos_sin_cache, k_cache, v_cache, slot_mapping)
        return done

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        done = self.layer_ops.silu_and_mul(x)
        return super().silu_and_mul(x) if done is None else done
