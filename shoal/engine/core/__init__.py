"""The engine core: requests, paged-KV bookkeeping, scheduling, sampling and the step loop."""

from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.core.engine_core import EngineCore
from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.core.outputs import (
    EngineStats,
    FinishReason,
    RequestMetrics,
    RequestOutput,
    SampleLogprobs,
    TokenLogprob,
)
from shoal.engine.core.sampling_params import SamplingParams

__all__ = [
    "EngineConfig",
    "EngineCore",
    "EngineStats",
    "FinishReason",
    "InvalidRequestError",
    "RequestMetrics",
    "RequestOutput",
    "SampleLogprobs",
    "SamplingParams",
    "TokenLogprob",
]
