"""The Python heap of a serving process: no cyclic collections while the model loads, none of it walked after.

Loading SmolLM2 leaves ~880,000 tracked objects (torch, tokenizer tables, modules). While they pile up,
CPython runs full collections over all of them (nine on the way to a served model, 1.7 CPU s in all); once
served, each full collection would walk them again, a 250-400 ms stall of the step thread that shows as one
very late token. The loaded objects live as long as the process, so after one final collection they are moved
to the permanent generation (``gc.freeze``): later collections only walk what requests create.
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
