"""The allowed-token masks of the constrained rows of a batch, filled by the grammar library and applied with torch.

llguidance writes each matcher's mask as a bit per token (32 to an int32 word) into one host tensor, in parallel
across the rows on its own thread pool; the bits are unpacked where it is cheapest (numpy on the CPU, torch shifts
on a GPU) and one in-place ``masked_fill_`` sets the logits of forbidden tokens to -inf on whatever device the
logits live (no Python loop over rows or vocabulary). Unconstrained rows are never touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import llguidance
import numpy as np
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
        # what llguidance.torch.fill_next_token_bitmask_par does, without importing that module: it decorates a
        # function with torch.compile at import, which loads torch._dynamo (2.3 s of the engine's start-up)
        words = bitmask.shape[1]
        pairs = [(m, i) for i, m in enumerate(matchers)]
        self._executor.unsafe_compute_mask_ptr(pairs, bitmask.data_ptr(), words * 4, len(rows))
        apply_bitmask(logits, rows, bitmask.to(logits.device, non_blocking=True))


def apply_bitmask(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> None:
    """Sets ``logits[rows[i], t]`` to -inf wherever bit ``t`` of ``bitmask[i]`` is 0 (words of 32 tokens), in place."""
    forbidden = _forbidden(bitmask, logits.shape[-1]).to(logits.device)
    if rows != list(range(logits.shape[0])):
        mask = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        mask[rows] = forbidden
        forbidden = mask
    logits.masked_fill_(forbidden, float("-inf"))


def _forbidden(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """The cleared bits as a ``[rows, vocab]`` bool tensor. On the CPU numpy unpacks the words' bytes (lowest
    bit first, as the little-endian hosts we run on store them): 0.1 ms for 32 rows of 49,152 tokens, where the
    shift-and-and below took 20 ms there; on a GPU the shifts are one kernel each."""
    if bitmask.device.type == "cpu":
        bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")[:, :vocab]
        return torch.from_numpy(bits) == 0
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    return ((bitmask[:, :, None] >> shifts) & 1).reshape(bitmask.shape[0], -1)[:, :vocab] == 0
