"""The Shoal engine: a Llama-family model on a paged KV cache with continuous batching.

Exports resolve lazily: ``shoal.engine.cli`` lives in this package and must stay importable without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EngineConfig": "shoal.engine.core",
    "EngineCore": "shoal.engine.core",
    "GenerationOutput": "shoal.engine.llm",
    "GrammarSpec": "shoal.protocol.structured_output",
    "InvalidRequestError": "shoal.engine.core",
    "LLM": "shoal.engine.llm",
    "RequestOutput": "shoal.engine.core",
    "SamplingParams": "shoal.engine.core",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'shoal.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
