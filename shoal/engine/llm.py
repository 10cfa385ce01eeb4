"""The offline API: hand over prompts, get completions back, with the full engine underneath.

``LLM.generate`` queues every prompt at once and steps the engine until all are done, so the scheduler
batches them continuously exactly as the server does under load.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.core.engine_core import EngineCore
from shoal.engine.core.outputs import FinishReason, RequestMetrics, RequestOutput, SampleLogprobs
from shoal.engine.core.sampling_params import SamplingParams

Prompt = str | list[int]


@dataclass
class GenerationOutput:
    """One finished completion."""

    request_id: str
    prompt: Prompt
    prompt_token_ids: list[int] = field(default_factory=list)
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[SampleLogprobs] | None = None
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    num_cached_tokens: int = 0
    metrics: RequestMetrics | None = None


class LLM:
    """``LLM("smollm2-135m", dtype="bfloat16").generate(["Hello"], SamplingParams(max_tokens=8))``.

    Options are the fields of ``EngineConfig`` (``block_size``, ``max_num_batched_tokens``, ``max_num_seqs``,
    ``num_kv_blocks``, ``enable_prefix_caching``, ``dtype``, ``attention_backend``, ...).
    """

    def __init__(self, model: str, **options: Any) -> None:
        self.engine = EngineCore.from_config(EngineConfig(model=model, **options))
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[GenerationOutput]:
        """Completes every prompt (strings or token-id lists); one params for all or one per prompt."""
        batch = _as_batch(prompts)
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(batch)
        if len(params) != len(batch):
            raise ValueError(f"params: got {len(params)} for {len(batch)} prompts")
        results: dict[str, GenerationOutput] = {}
        try:
            for prompt, p in zip(batch, params, strict=True):
                request_id = str(next(self._ids))
                token_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
                self.engine.add_request(request_id, token_ids, p)
                results[request_id] = GenerationOutput(
                    request_id, prompt, token_ids, logprobs=[] if p.logprobs is not None else None
                )
            with self.engine.stepping():
                while self.engine.has_unfinished():
                    for out in self.engine.step():
                        _accumulate(results[out.request_id], out)
        except BaseException:
            self.engine.abort(results)
            while self.engine.has_unfinished():
                self.engine.step()
            raise
        return list(results.values())

    def chat(
        self,
        conversations: list[dict[str, Any]] | Sequence[list[dict[str, Any]]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[GenerationOutput]:
        """Renders each conversation with the model's chat template and completes it."""
        if conversations and isinstance(conversations[0], dict):
            batch = [cast(list[dict[str, Any]], conversations)]  # one conversation
        else:
            batch = list(cast(Sequence[list[dict[str, Any]]], conversations))
        prompts: list[Prompt] = [
            self.tokenizer.encode(self.tokenizer.apply_chat_template(c), add_special_tokens=False) for c in batch
        ]
        return self.generate(prompts, params)


def _as_batch(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(t, int) for t in items):
        return [cast(list[int], items)]  # one prompt as token ids
    return cast(list[Prompt], items)


def _accumulate(result: GenerationOutput, out: RequestOutput) -> None:
    result.token_ids.extend(out.new_token_ids)
    result.text += out.new_text
    if result.logprobs is not None and out.new_logprobs:
        result.logprobs.extend(out.new_logprobs)
    if out.finished:
        result.finish_reason = out.finish_reason
        result.stop_reason = out.stop_reason
        result.num_cached_tokens = out.num_cached_tokens
        result.metrics = out.metrics
