"""``POST /v1/chat/completions``: a conversation rendered with the model's chat template, ``n`` choices."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from shoal.engine.server.async_engine import Child
from shoal.engine.server.logprobs import chat_logprobs
from shoal.engine.server.output_stream import Delta
from shoal.engine.server.request_params import output_limit, sampling_params
from shoal.engine.server.serving import ChoiceState, Outcome, Prepared, chunks_closing
from shoal.protocol.errors import invalid_request
from shoal.protocol.openai_api import (
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    ChatDelta,
    ChatResponseMessage,
    ChatStreamChoice,
    UsageInfo,
)
from shoal.protocol.sse import sse_event
from shoal.tokenizer import ChatTemplateError, Tokenizer, chat_token_ids


async def prepare(req: ChatCompletionRequest, request_id: str, tokenizer: Tokenizer, max_model_len: int) -> Prepared:
    started = time.perf_counter()
    try:
        ids = await asyncio.to_thread(chat_token_ids, tokenizer, req)
    except ChatTemplateError as exc:
        raise invalid_request(f"messages: {exc}", param="messages") from None
    tokenize_s = time.perf_counter() - started
    max_tokens = output_limit(req, len(ids), max_model_len, "messages")
    children = [Child(i, ids, sampling_params(req, max_tokens, i)) for i in range(req.n)]
    return Prepared.of(req, request_id, children, tokenize_s)


class Formatter:
    def __init__(self, tokenizer: Tokenizer, prepared: Prepared) -> None:
        self._tokenizer = tokenizer
        self._id = f"chatcmpl-{prepared.request_id}"
        self._model = prepared.model

    def _chunk(self, choices: list[ChatStreamChoice]) -> ChatCompletionStreamResponse:
        return ChatCompletionStreamResponse(id=self._id, model=self._model, choices=choices)

    def opening(self, outcome: Outcome) -> str:
        """OpenAI opens each choice with a delta that only names the role."""
        return "".join(
            sse_event(self._chunk([ChatStreamChoice(index=c.index, delta=ChatDelta(role="assistant", content=""))]))
            for c in outcome.choices
        )

    def chunk(self, delta: Delta, choice: ChoiceState) -> str:
        if not delta.text and not delta.finished and not delta.logprobs:
            return ""
        out = ChatStreamChoice(
            index=delta.index,
            delta=ChatDelta(content=delta.text) if delta.text or not delta.finished else ChatDelta(),
            logprobs=chat_logprobs(self._tokenizer, delta.logprobs) if delta.logprobs else None,
            finish_reason=delta.finish_reason if delta.finished else None,
            stop_reason=delta.stop_reason if delta.finished else None,
        )
        return sse_event(self._chunk([out]))

    def closing(self, outcome: Outcome) -> str:
        return chunks_closing(outcome, self._usage_chunk)

    def _usage_chunk(self, usage: UsageInfo) -> BaseModel:
        return ChatCompletionStreamResponse(id=self._id, model=self._model, choices=[], usage=usage)

    def response(self, outcome: Outcome) -> BaseModel:
        choices = [
            ChatChoice(
                index=c.index,
                message=ChatResponseMessage(content=c.text),
                logprobs=chat_logprobs(self._tokenizer, c.logprobs) if c.logprobs else None,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
            )
            for c in outcome.choices
        ]
        return ChatCompletionResponse(id=self._id, model=self._model, choices=choices, usage=outcome.usage())
