"""Which LoRA slot each token of a step uses, in the form both LoRA implementations read.

A step's tokens each name the adapter slot whose low-rank update they get (``-1``: none, the row is left as the
base projection computed it). The Triton kernels (``shoal.kernels.triton.lora``) work on one slot's tokens at a
time, in tiles, as punica's SGMV does: so the host, which knows every request's slot anyway, lists the tokens
grouped by slot once per step (``sorted_tokens``, each slot's run at ``slot_starts[s]`` of length
``slot_counts[s]``), and every projection of every layer reuses the lists. Built from host lists and moved in one
copy; no kernel ever has to sort or synchronize.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_LORA_PARTS = 3  # q, k, v: the most parts a fused projection has


@dataclass(frozen=True)
class LoRAMetadata:
    """One step's tokens by adapter slot; tensors on the model's device, int32."""

    token_slots: torch.Tensor  # [num_tokens], the slot of each token, -1 for none
    sorted_tokens: torch.Tensor  # [adapted tokens], token indices grouped by slot, ascending within a slot
    slot_starts: torch.Tensor  # [num_slots], where each slot's run starts in sorted_tokens
    slot_counts: torch.Tensor  # [num_slots], its length (0 for a slot no token uses)
    max_slot_tokens: int  # the longest run: the kernels' grid covers it in tiles

    @property
    def num_tokens(self) -> int:
        return int(self.token_slots.shape[0])

    @property
    def num_slots(self) -> int:
        return int(self.slot_counts.shape[0])

    @staticmethod
    def build(token_slots: list[int], num_slots: int, device: torch.device | str = "cpu") -> LoRAMetadata:
        """From each token's slot (``-1``: none) as a host list."""
        runs: list[list[int]] = [[] for _ in range(num_slots)]
        for token, slot in enumerate(token_slots):
            if not -1 <= slot < num_slots:
                raise ValueError(f"token_slots[{token}] = {slot} is no slot of {num_slots} (or -1 for none)")
            if slot >= 0:
                runs[slot].append(token)
        counts = [len(run) for run in runs]
        starts = [sum(counts[:s]) for s in range(num_slots)]
        flat = [token for run in runs for token in run]
        packed = torch.tensor([*token_slots, *flat, *starts, *counts], dtype=torch.int32).to(device)
        cuts = [len(token_slots), len(flat), num_slots, num_slots]
        slots, tokens, starts_t, counts_t = packed.split(cuts)
        return LoRAMetadata(slots, tokens, starts_t, counts_t, max(counts, default=0))
