"""The Python heap of a serving process: what the model load leaves is never walked by a collection again.

Loading SmolLM2 leaves ~880,000 tracked objects (torch, tokenizer tables, modules) that live as long as the
process. Each full collection walks all of them: 270-400 ms on this machine, a stall of the step thread that
would show as one very late token for every stream. Steady serving allocates little (no collection of any
generation ran in 7 x 128 streamed tokens at one stream, three young ones in 64 x 32 at 64), so this is
insurance for the tail, not a per-token saving: the load runs with the collector off, then one collection
frees its garbage and ``gc.freeze`` moves the rest to the permanent generation, out of every later walk.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def load_then_freeze(load: Callable[[], T]) -> T:
    """Runs ``load`` with the cyclic collector off, then collects once and freezes what is left.

    For a process's one long-lived engine (``shoal serve``); the collector's previous on/off state is restored
    whether or not ``load`` raises, and a failed load freezes nothing.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        loaded = load()
        gc.collect()
        gc.freeze()
        return loaded
    finally:
        if enabled:
            gc.enable()
