"""Engine kinds: Shoal's engine, vLLM, SGLang and llama.cpp, each as one pure adapter (``docs/engines.md``)."""

from shoal.engine_kinds.adapter import EngineAdapter, EngineSettings, KVEventsForm, MetricMap, Refusal, message
from shoal.engine_kinds.kinds import ADAPTERS, DEFAULT_KIND, ENGINE_KINDS, EngineKind, UnknownEngineKind, adapter
from shoal.engine_kinds.shoal_engine import DEFAULT_BLOCK_SIZE, ONE_GPU_MESSAGE

__all__ = [
    "ADAPTERS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_KIND",
    "ENGINE_KINDS",
    "ONE_GPU_MESSAGE",
    "EngineAdapter",
    "EngineKind",
    "EngineSettings",
    "KVEventsForm",
    "MetricMap",
    "Refusal",
    "UnknownEngineKind",
    "adapter",
    "message",
]
