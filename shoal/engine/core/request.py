"""A request inside the engine: the tokens it knows and how many of them are already in the KV cache.

Following vLLM v1 there is no prefill or decode phase: ``num_computed_tokens`` chases ``num_tokens``. A
prefill chunk, a prefix-cache hit (computed jumps ahead) and a preemption (computed drops to zero) are all
moves of those two counters.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from shoal.engine.core.outputs import FinishReason, RequestMetrics
from shoal.engine.core.sampling_params import SamplingParams
from shoal.protocol.block_hash import adapter_extra_key

if TYPE_CHECKING:
    from llguidance import LLMatcher


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_ABORTED = "finished_aborted"

    @property
    def finished(self) -> bool:
        return self in _FINISH_REASONS

    @property
    def finish_reason(self) -> FinishReason | None:
        return _FINISH_REASONS.get(self)


_FINISH_REASONS: dict[RequestStatus, FinishReason] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


class Request:
    """One sequence being generated; the scheduler, block manager and model runner all read it."""

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        arrival_time: float,
        priority: int = 0,
        max_output_tokens: int | None = None,
        lora_name: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.params = params
        self.priority = priority
        self.prompt_token_ids = list(prompt_token_ids)
        self.all_token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.max_output_tokens = params.max_tokens if max_output_tokens is None else max_output_tokens
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache at first scheduling
        self.status = RequestStatus.WAITING
        self.block_ids: list[int] = []
        self.block_hashes: list[int] = []  # chained hashes of the full blocks of all_token_ids seen so far
        self.num_named_blocks = 0  # leading blocks of block_ids the block manager has already tried to cache
        self.num_dropped_blocks = 0  # leading blocks a sliding window left behind (now the null block)
        self.stop_reason: str | int | None = None
        self.metrics = RequestMetrics(arrival_time=arrival_time)
        self.grammar: LLMatcher | None = None  # structured output: the matcher its output tokens have advanced
        self.lora_name = lora_name  # the LoRA adapter it runs through; None: the base model
        self.block_hash_key = adapter_extra_key(lora_name)  # two adapters never share KV blocks

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status.finished

    def append_token(self, token_id: int) -> None:
        self.all_token_ids.append(token_id)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.value}, computed={self.num_computed_tokens}/"
            f"{self.num_tokens}, blocks={self.block_ids})"
        )
