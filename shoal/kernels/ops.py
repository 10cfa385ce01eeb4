"""The hot-path operations the model calls, as one interface with a torch and a Triton implementation.

The model never calls a kernel directly: it asks ``shoal.kernels.get_ops()`` for a ``KernelOps`` and calls
through it, so the whole engine runs either path. Layouts (shared by both implementations):

- KV cache, one pair per layer: ``k_cache`` and ``v_cache`` of shape ``[num_blocks, block_size, num_kv_heads,
  head_dim]``. Slot ``b * block_size + o`` is offset ``o`` of block ``b``.
- Queries and outputs: ``[num_tokens, num_heads, head_dim]``; new keys and values:
  ``[num_tokens, num_kv_heads, head_dim]``.
- Rotary cache: ``cos_sin_cache`` of shape ``[max_position, rotary_dim]``, cosines in the first half and sines
  in the second (the "neox" rotate-half layout Hugging Face's Llama uses).
"""

from __future__ import annotations

from typing import Protocol

import torch

from shoal.kernels.lora_metadata import LoRAMetadata
from shoal.kernels.metadata import AttentionMetadata


class KernelOps(Protocol):
    """What a backend provides; every function is checked against ``shoal.kernels.torch_ops``."""

    name: str
    masks_sliding_window: bool  # whether ``attention`` honours ``sliding_window``
    caps_attention_logits: bool  # whether ``attention`` honours ``softcap``
    lora_by_token: bool  # whether the model's LoRA deltas should go through ``lora_shrink`` / ``lora_expand``

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Scatters this step's keys and values into their cache slots."""

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
        """Causal attention of the packed queries over each sequence's paged KV; returns ``query``'s shape.
        With ``sliding_window`` W, the query at position p sees keys p - W + 1 .. p only; with ``softcap`` c,
        each scaled score s becomes ``tanh(s / c) * c`` before the softmax (Gemma 2's attention soft-capping)."""

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm computed in fp32 and cast back, as Hugging Face's LlamaRMSNorm does."""

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(rms_norm(x + residual), x + residual)``: the residual add fused into the norm."""

    def rotary(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotates ``query`` ``[T, H, D]`` and ``key`` ``[T, KVH, D]`` by their positions; may work in place."""

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
        """``rotary`` then ``write_kv`` as one operation (on a GPU, one launch instead of two): writes the rotated
        keys and the values to their cache slots and returns the rotated query (``query`` itself, rotated in
        place, or a new tensor); ``key`` is left as it was."""

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """``silu(x[..., :d]) * x[..., d:]`` for the SwiGLU MLP."""

    def grouped_matmul(self, rows: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """A mixture of experts' projections: ``rows`` ``[R, K]`` sorted by expert, the first ``counts[0]`` expert
        0's, the next ``counts[1]`` expert 1's..., each run times its expert's ``weight[e]`` (``[E, N, K]``)
        transposed; returns ``[R, N]``."""

    def lora_shrink(self, x: torch.Tensor, a: torch.Tensor, meta: LoRAMetadata) -> torch.Tensor:
        """LoRA's first product, each token through its slot: ``x`` ``[T, in]`` times ``a[:, slot]`` (``a``:
        ``[in, slots, C]``, every slot's ``A`` transposed); returns fp32 ``[T, C]``, zeros for tokens with slot
        -1."""

    def lora_expand(
        self, y: torch.Tensor, t: torch.Tensor, b: torch.Tensor, meta: LoRAMetadata, part_sizes: tuple[int, ...]
    ) -> None:
        """LoRA's second product, added into ``y`` ``[T, out]`` in place: for each part ``p`` of a fused
        projection (``part_sizes`` split ``out``), ``t``'s section ``p`` (``C / parts`` columns) times ``b[slot,
        section p, part p]`` (``b``: ``[slots, C, out]``, ``scale * B`` transposed); rows with slot -1 untouched."""
