"""What the engine hands back after each step: per-request deltas and engine-wide counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float


@dataclass(frozen=True)
class SampleLogprobs:
    """The chosen token's log-probability (of the model's raw distribution) and the top-n alternatives."""

    token_id: int
    logprob: float
    top: list[TokenLogprob]


@dataclass
class RequestMetrics:
    """Monotonic timestamps (``time.monotonic()``) of one request's life; ``None`` until reached."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None

    @property
    def queue_time(self) -> float | None:
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def prefill_time(self) -> float | None:
        if self.first_token_time is None or self.first_scheduled_time is None:
            return None
        return self.first_token_time - self.first_scheduled_time

    @property
    def decode_time(self) -> float | None:
        if self.first_token_time is None or self.last_token_time is None:
            return None
        return self.last_token_time - self.first_token_time

    @property
    def e2e_time(self) -> float | None:
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass(slots=True)
class RequestOutput:
    """What one request gained in one step; ``new_text`` is safe to append (never half a character)."""

    request_id: str
    new_token_ids: list[int]
    new_text: str
    new_logprobs: list[SampleLogprobs] | None
    finished: bool
    finish_reason: FinishReason | None
    stop_reason: str | int | None
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    metrics: RequestMetrics
    lora_name: str | None = None  # the LoRA adapter it runs through


@dataclass
class EngineStats:
    """A snapshot of the engine for metrics and routing; token and preemption counts are cumulative."""

    num_running: int
    num_waiting: int
    kv_usage: float
    num_free_blocks: int
    num_total_blocks: int
    prefix_queried_tokens: int
    prefix_hit_tokens: int
    num_preemptions: int
    prompt_tokens: int
    generation_tokens: int
    finished_by_reason: dict[str, int] = field(default_factory=dict)
    # LoRA (empty without it): requests by adapter, running and waiting; adapters evicted from a slot so far.
    lora_running: dict[str, int] = field(default_factory=dict)
    lora_waiting: dict[str, int] = field(default_factory=dict)
    lora_evictions: int = 0
