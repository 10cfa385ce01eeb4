"""The allowed-token masks of the constrained rows of a batch, filled by the grammar library and applied with torch.

llguidance writes each matcher's mask as a bit per token (32 to an int32 word) into one host tensor, in parallel
across the rows on its own thread pool; torch then unpacks the bits and sets the logits of forbidden tokens to
-inf on whatever device the logits live, with a few whole-tensor ops (no Python loop over rows or vocabulary).
Unconstrained rows are never touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import llguidance
import llguidance.torch
import torch


class TokenBitmask:
    """Fills and applies masks; owns the library's thread pool (created on the first constrained step)."""

    def __init__(self) -> None:
        self._executor: llguidance.LLExecutor | None = None

    def apply(self, logits: torch.Tensor, rows: list[int], matchers: Sequence[llguidance.LLMatcher]) -> None:
        """In place: every token a row's matcher forbids gets logit -inf (``rows[i]`` is ``matchers[i]``'s row)."""
        if self._executor is None:
            self._executor = llguidance.LLExecutor()
        pinned = logits.device.type == "cuda"  # the copy to the GPU then runs without a staging buffer
        bitmask = torch.full((len(rows), (logits.shape[-1] + 31) // 32), -1, dtype=torch.int32, pin_memory=pinned)
        llguidance.torch.fill_next_token_bitmask_par(self._executor, [(m, i) for i, m in enumerate(matchers)], bitmask)
        apply_bitmask(logits, rows, bitmask.to(logits.device, non_blocking=True))


def apply_bitmask(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> None:
    """Sets ``logits[rows[i], t]`` to -inf wherever bit ``t`` of ``bitmask[i]`` is 0 (words of 32 tokens)."""
    vocab = logits.shape[-1]
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    allowed = ((bitmask[:, :, None] >> shifts) & 1).bool().reshape(len(rows), -1)[:, :vocab]
    index = torch.tensor(rows, dtype=torch.long, device=logits.device)
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))
