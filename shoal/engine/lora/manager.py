"""The engine's adapters: those it knows (by name), the slots they occupy, and the model's LoRA projections.

Owned by the step thread. The scheduler acquires and releases slots (``slots``); before each forward pass the
runner calls ``prepare``, which copies into the model any adapter newly placed in a slot and tells the model's
projections which rows use which slot.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shoal.engine.lora.adapter import LoRAAdapter
from shoal.engine.lora.slots import LoRASlots
from shoal.engine.model.lora_linear import (
    MASKED_MAX_ROWS,
    LoRABatch,
    LoRALinear,
    ProjectionShape,
    add_lora_projections,
)
from shoal.kernels import KernelOps
from shoal.kernels.lora_metadata import LoRAMetadata


class LoRAManager:
    """Known adapters, their slots and the projections the slots live in."""

    def __init__(
        self,
        projections: dict[tuple[int, str], LoRALinear],
        batch: LoRABatch,
        max_loras: int,
        max_rank: int,
        by_token: bool = False,
    ) -> None:
        self.projections = projections
        self.by_token = by_token  # each token's slot for the backend's kernels, not masks or groups
        self.dtype = next(iter(projections.values())).b.dtype
        self.masked_max_rows = MASKED_MAX_ROWS  # up to this many rows a step, the masked way (lora_linear.py)
        self.batch = batch
        self.max_rank = max_rank
        self.max_loras = max_loras
        self.adapters: dict[str, LoRAAdapter] = {}
        self.slots = LoRASlots(max_loras)
        self._written: list[str | None] = [None] * max_loras  # what each slot's tensors hold now

    @classmethod
    def wrap(
        cls,
        model: torch.nn.Module,
        max_loras: int,
        max_rank: int,
        ops: KernelOps,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> LoRAManager:
        """Gives ``model``'s projections ``max_loras`` slots of rank up to ``max_rank`` and manages them, through
        ``ops``' LoRA kernels where the backend has them (``lora_by_token``)."""
        projections, batch = add_lora_projections(model, max_loras, max_rank, ops, dtype, device)
        return cls(projections, batch, max_loras, max_rank, ops.lora_by_token)

    @property
    def shapes(self) -> dict[tuple[int, str], ProjectionShape]:
        return {key: projection.shape for key, projection in self.projections.items()}

    def add(self, adapter: LoRAAdapter) -> None:
        self.adapters[adapter.name] = adapter

    def remove(self, name: str) -> None:
        """Forgets ``name`` and frees its slot; the caller has made sure no request uses it."""
        slot = self.slots.slot_of(name)
        self.slots.drop(name)
        if slot is not None:
            self._written[slot] = None
        del self.adapters[name]

    def prepare(self, row_slots: Sequence[tuple[int | None, int]], device: torch.device | str) -> None:
        """Loads newly placed adapters into their slots and groups this step's rows by slot: ``row_slots`` is
        each request's slot (``None``: the base model) and token count, in batch order."""
        for index, name in enumerate(self.slots.holders):
            if name is not None and self._written[index] != name:
                self._write(index, self.adapters[name])
        batch = self.batch
        batch.tokens, batch.groups, batch.slot_mask, batch.masks = None, [], None, {}
        num_rows = sum(count for _, count in row_slots)
        if all(slot is None for slot, _ in row_slots):
            return
        if self.by_token:
            token_slots = [-1 if slot is None else slot for slot, count in row_slots for _ in range(count)]
            batch.tokens = LoRAMetadata.build(token_slots, self.max_loras, device)
            return
        if num_rows <= self.masked_max_rows:
            mask = torch.zeros(num_rows, self.max_loras, dtype=self.dtype)
            mask[_rows_and_slots(row_slots)] = 1
            batch.slot_mask = mask.to(device)
            return
        rows: dict[int, list[int]] = {}
        start = 0
        for row_slot, count in row_slots:
            if row_slot is not None:
                rows.setdefault(row_slot, []).extend(range(start, start + count))
            start += count
        for slot, indices in rows.items():
            whole = len(indices) == num_rows
            batch.groups.append((slot, None if whole else torch.tensor(indices, dtype=torch.long, device=device)))

    def _write(self, slot: int, adapter: LoRAAdapter) -> None:
        for key, projection in self.projections.items():
            projection.set_slot(slot, adapter.weights.get(key, []))
        self._written[slot] = adapter.name


def _rows_and_slots(row_slots: Sequence[tuple[int | None, int]]) -> tuple[list[int], list[int]]:
    """The (row, slot) coordinates of every row that runs through an adapter."""
    rows: list[int] = []
    slots: list[int] = []
    start = 0
    for slot, count in row_slots:
        if slot is not None:
            rows.extend(range(start, start + count))
            slots.extend([slot] * count)
        start += count
    return rows, slots
