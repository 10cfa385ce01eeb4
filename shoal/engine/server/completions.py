"""``POST /v1/completions``: prompts (text or token ids, one or a batch) to ``n`` choices each.

With ``echo``, each choice's text opens with its prompt (as given, or decoded from its token ids), in the first
streamed chunk of that choice; usage and the prompt tokens do not change.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from shoal.engine.server.async_engine import Child
from shoal.engine.server.logprobs import completion_logprobs
from shoal.engine.server.output_stream import Delta
from shoal.engine.server.request_params import output_limit, sampling_params
from shoal.engine.server.serving import ChoiceState, Outcome, Prepared, chunks_closing
from shoal.protocol.openai_api import (
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    CompletionStreamResponse,
    UsageInfo,
)
from shoal.protocol.sse import sse_event
from shoal.tokenizer import Tokenizer, completion_token_ids


async def prepare(req: CompletionRequest, request_id: str, tokenizer: Tokenizer, max_model_len: int) -> Prepared:
    """Tokenizes every prompt (off the event loop) and builds ``n`` engine requests per prompt."""
    started = time.perf_counter()
    token_ids = await asyncio.to_thread(completion_token_ids, tokenizer, req)
    tokenize_s = time.perf_counter() - started
    children = []
    for p, ids in enumerate(token_ids):
        field = "prompt" if len(token_ids) == 1 else f"prompt[{p}]"
        max_tokens = output_limit(req, len(ids), max_model_len, field)
        children += [Child(p * req.n + i, ids, sampling_params(req, max_tokens, i)) for i in range(req.n)]
    echoes = [_prompt_text(tokenizer, p) for p in req.prompts() for _ in range(req.n)] if req.echo else []
    return Prepared.of(req, request_id, children, tokenize_s, echoes)


def _prompt_text(tokenizer: Tokenizer, prompt: str | list[int]) -> str:
    """What ``echo`` repeats: the prompt text as sent, or its token ids decoded (special tokens included)."""
    return prompt if isinstance(prompt, str) else tokenizer.decode(prompt, skip_special_tokens=False)


class Formatter:
    def __init__(self, tokenizer: Tokenizer, prepared: Prepared) -> None:
        self._tokenizer = tokenizer
        self._id = f"cmpl-{prepared.request_id}"
        self._model = prepared.model
        self._echoes = prepared.echoes
        self._echoed: set[int] = set()  # choices whose prompt has been streamed

    def _echo(self, index: int) -> str:
        return self._echoes[index] if self._echoes else ""

    def opening(self, outcome: Outcome) -> str:
        return ""

    def chunk(self, delta: Delta, choice: ChoiceState) -> str:
        echo = "" if delta.index in self._echoed else self._echo(delta.index)
        self._echoed.add(delta.index)
        if not echo and not delta.text and not delta.finished and not delta.logprobs:
            return ""
        logprobs = None
        if delta.logprobs:
            logprobs = completion_logprobs(self._tokenizer, delta.logprobs, len(choice.text) - len(delta.text))
        out = CompletionChoice(
            index=delta.index,
            text=echo + delta.text,
            logprobs=logprobs,
            finish_reason=delta.finish_reason if delta.finished else None,
            stop_reason=delta.stop_reason if delta.finished else None,
        )
        return sse_event(CompletionStreamResponse(id=self._id, model=self._model, choices=[out]))

    def closing(self, outcome: Outcome) -> str:
        return chunks_closing(outcome, self._usage_chunk)

    def _usage_chunk(self, usage: UsageInfo) -> BaseModel:
        return CompletionStreamResponse(id=self._id, model=self._model, choices=[], usage=usage)

    def response(self, outcome: Outcome) -> BaseModel:
        choices = [
            CompletionChoice(
                index=c.index,
                text=self._echo(c.index) + c.text,
                logprobs=completion_logprobs(self._tokenizer, c.logprobs, 0) if c.logprobs else None,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
            )
            for c in outcome.choices
        ]
        return CompletionResponse(id=self._id, model=self._model, choices=choices, usage=outcome.usage())
