"""LoRA deltas on the model's projections, for a batch whose rows use different adapters (or none).

With ``--enable-lora``, ``LoRAManager.wrap`` (at engine start) wraps each decoder layer's ``qkv_proj``,
``o_proj``, ``gate_up_proj`` and ``down_proj`` (whatever base module computes it: plain, oneDNN-packed or
quantized) in a ``LoRALinear`` that holds ``max_loras`` adapter slots. A fused projection has one section of
``max_rank`` columns per part (q, k, v; gate, up): slot ``s``'s ``a[:, s]`` is ``[in, parts * max_rank]`` (each
part's ``A`` transposed in its section, zeros past its rank) and ``b[s]`` is ``[parts * max_rank, out]`` (each
part's ``scale * B`` transposed, in its section's rows and its part's columns), so one slot's delta for every part
is ``(x @ a[:, s]) @ b[s]``, and ``b[s]`` is block-diagonal: section ``p`` feeds part ``p``'s columns only. An
adapter that names the fused projection itself (Phi-3's ``qkv_proj``) keeps that shape: its ``A`` goes into every
section and its ``B``'s columns of part ``p`` into section ``p``.

Every ``LoRALinear`` of a model shares one ``LoRABatch``, which the runner fills before each step, in one of three
ways (same sums, different cost), chosen by the kernel backend (``KernelOps.lora_by_token``):

- by token (Triton, on a GPU): each token's slot (``LoRAMetadata``), and two launches per projection,
  ``lora_shrink`` (``x @ a`` through each token's slot) and ``lora_expand`` (each part's section times its slot's
  ``b`` into that part's output columns), punica's SGMV;
- on the torch path, masked, for batches of up to ``MASKED_MAX_ROWS`` rows (decodes): every row is multiplied by
  every slot's ``A`` at once (``x @ a`` over all slots' columns), the columns of the slots a row does not use are
  zeroed by a mask, and one ``addmm_`` adds the result times all slots' ``B``: three operations per projection
  whatever the number of adapters in the batch, where per-slot work would cost a few small operations per adapter;
- on the torch path, grouped, above it (prefills): the rows of each slot are gathered and get that slot's delta
  alone (``index_add_``), so a long prompt pays for its own adapter only.

Rows without an adapter get nothing. Without ``--enable-lora`` nothing here is built, and the model runs exactly
its old code path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch
from torch import Tensor, nn

from shoal.kernels import KernelOps
from shoal.kernels.lora_metadata import LoRAMetadata

# Our fused projections, by the name of the module in a decoder layer, and the part names a PEFT adapter uses.
FUSED_PARTS: dict[str, tuple[str, ...]] = {
    "self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "self_attn.o_proj": ("o_proj",),
    "mlp.gate_up_proj": ("gate_proj", "up_proj"),
    "mlp.down_proj": ("down_proj",),
}


MASKED_MAX_ROWS = 256


@dataclass
class LoRABatch:
    """This step's rows by adapter slot: ``tokens`` (by token, for the backend's kernels), ``groups`` (``(slot,
    rows)``, ``rows`` ``None`` for the whole batch) or, in a masked step, ``slot_mask`` (``[rows, slots]``, 1 where
    the row uses the slot; ``None`` otherwise), and the mask widened to each section count's columns, made on
    first use."""

    tokens: LoRAMetadata | None = None
    groups: list[tuple[int, Tensor | None]] = field(default_factory=list)
    slot_mask: Tensor | None = None
    masks: dict[int, Tensor] = field(default_factory=dict)

    def mask(self, columns_per_slot: int) -> Tensor:
        mask = self.masks.get(columns_per_slot)
        if mask is None:
            assert self.slot_mask is not None
            mask = self.masks[columns_per_slot] = self.slot_mask.repeat_interleave(columns_per_slot, dim=1)
        return mask


@dataclass(frozen=True)
class ProjectionShape:
    """What an adapter must fit: the input width and each part's output width, in ``FUSED_PARTS`` order."""

    in_features: int
    part_sizes: tuple[int, ...]


class LoRALinear(nn.Module):
    """``base``'s forward plus, for each row, the delta of the adapter in its slot (none for unadapted rows)."""

    a: Tensor
    b: Tensor

    def __init__(
        self,
        base: nn.Module,
        shape: ProjectionShape,
        max_loras: int,
        max_rank: int,
        batch: LoRABatch,
        ops: KernelOps,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        super().__init__()
        self.base = base
        self.ops = ops
        self.shape = shape
        self.max_rank = max_rank
        self.batch = batch
        self.columns = len(shape.part_sizes) * max_rank  # per slot
        out = sum(shape.part_sizes)
        a = torch.zeros(shape.in_features, max_loras, self.columns, dtype=dtype, device=device)
        self.register_buffer("a", a)
        self.register_buffer("b", torch.zeros(max_loras, self.columns, out, dtype=dtype, device=device))
        self.a_all = a.view(shape.in_features, max_loras * self.columns)  # every slot's columns side by side
        self.b_all = self.b.view(max_loras * self.columns, out)

    def set_slot(self, slot: int, parts: list[tuple[int | None, Tensor, Tensor]]) -> None:
        """Writes one adapter into ``slot``: ``(part index or None for the whole fused projection, A [r, in],
        scale * B [out, r])`` each; parts it leaves out get zeros."""
        self.a[:, slot].zero_()
        self.b[slot].zero_()
        sizes = self.shape.part_sizes
        for part, lora_a, lora_b in parts:
            rank = lora_a.shape[0]
            for section in range(len(sizes)) if part is None else [part]:
                cols = slice(section * self.max_rank, section * self.max_rank + rank)
                start = sum(sizes[:section])
                # B's rows for this part: all of them for a part's own adapter, the part's slice of a whole one's
                rows = slice(0, sizes[section]) if part is not None else slice(start, start + sizes[section])
                self.a[:, slot, cols] = lora_a.t().to(self.a.dtype)
                self.b[slot, cols, start : start + sizes[section]] = lora_b[rows].t().to(self.b.dtype)

    def forward(self, x: Tensor) -> Tensor:
        out = self.base.forward(x)
        batch = self.batch
        if batch.tokens is not None:
            self.ops.lora_expand(
                out, self.ops.lora_shrink(x, self.a, batch.tokens), self.b, batch.tokens, self.shape.part_sizes
            )
            return out
        if batch.slot_mask is not None:
            return out.addmm_((x @ self.a_all).mul_(batch.mask(self.columns)), self.b_all)
        for slot, rows in batch.groups:
            if rows is None:
                out.addmm_(x @ self.a[:, slot], self.b[slot])
            else:
                out.index_add_(0, rows, (x[rows] @ self.a[:, slot]) @ self.b[slot])
        return out

    def extra_repr(self) -> str:
        return f"slots={self.b.shape[0]}, max_rank={self.max_rank}, parts={len(self.shape.part_sizes)}"


def add_lora_projections(
    model: nn.Module, max_loras: int, max_rank: int, ops: KernelOps, dtype: torch.dtype, device: torch.device | str
) -> tuple[dict[tuple[int, str], LoRALinear], LoRABatch]:
    """Wraps every LoRA-capable projection of every decoder layer; returns them by ``(layer, module path)`` and
    the batch they share. A mixture-of-experts layer's MLP has no dense projections, so only its attention gets
    slots."""
    batch = LoRABatch()
    wrapped: dict[tuple[int, str], LoRALinear] = {}
    for index, layer in enumerate(model.layers):  # type: ignore[arg-type]
        for path in FUSED_PARTS:
            owner_name, attr = path.split(".")
            owner = getattr(layer, owner_name)
            base = getattr(owner, attr, None)
            if base is None:
                continue
            shape = ProjectionShape(base.in_features, _part_sizes(path, owner, base.out_features))
            lora = LoRALinear(base, shape, max_loras, max_rank, batch, ops, dtype, device)
            setattr(owner, attr, lora)
            wrapped[(index, path)] = lora
    return wrapped, batch


def _part_sizes(path: str, owner: nn.Module, out_features: int) -> tuple[int, ...]:
    """How a fused projection's output splits: q|k|v by the attention's sizes, gate|up in halves."""
    if path == "self_attn.qkv_proj":
        q_size, kv_size = cast(int, owner.q_size), cast(int, owner.kv_size)
        return (q_size, kv_size, kv_size)
    if path == "mlp.gate_up_proj":
        return (out_features // 2, out_features // 2)
    return (out_features,)
