"""The CPU path of ``KernelOps``: torch's ops, with attention on shoal's C kernel over the paged cache.

``TorchOps.attention`` gathers each sequence's blocks, pads them to the longest and masks, which sends SDPA down
its slow masked path: on a 64-stream decode step that was half the step on an AMD EPYC. The C kernel
(``shoal.kernels.cpu.paged_attention``) reads the blocks in place, one pass per sequence and KV head for every
query head sharing it, with no padding, for decodes and prefill chunks alike. Dtypes it does not take (fp16)
keep the torch path.
"""

from __future__ import annotations

import torch

from shoal.kernels.cpu.paged_attention import PagedAttention
from shoal.kernels.metadata import AttentionMetadata
from shoal.kernels.torch_ops import TorchOps


class CpuOps(TorchOps):
    """torch for norms, RoPE, activations and KV writes; the C kernel for attention."""

    name = "cpu"

    def __init__(self, kernel: PagedAttention) -> None:
        super().__init__()
        self.kernel = kernel

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
