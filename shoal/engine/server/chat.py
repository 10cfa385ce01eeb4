"""``POST /v1/chat/completions``: a conversation rendered with the model's chat template, ``n`` choices.

The request's ``tools`` are rendered into the prompt by the template; its output is read for tool calls as its
``ToolCallPlan`` says (``shoal.engine.tool_parsers``): each choice's text goes through a ``ToolCallStream`` that
turns it into content and OpenAI's tool-call deltas, or, unstreamed, ``message.tool_calls``.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.server.async_engine import Child
from shoal.engine.server.logprobs import chat_logprobs
from shoal.engine.server.output_stream import Delta
from shoal.engine.server.request_params import engine_error, output_limit, reading_tool_calls, sampling_params
from shoal.engine.server.serving import ChoiceState, Outcome, Prepared, chunks_closing
from shoal.engine.tool_parsers import ToolCallStream, ToolParserSettings, plan_tool_calls
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
from shoal.protocol.tools import DeltaToolCall
from shoal.tokenizer import ChatTemplateError, Tokenizer, chat_token_ids


async def prepare(
    req: ChatCompletionRequest,
    request_id: str,
    tokenizer: Tokenizer,
    max_model_len: int,
    tools: ToolParserSettings | None = None,
) -> Prepared:
    try:
        plan = plan_tool_calls(req, tools or ToolParserSettings(), tokenizer.chat_template)
    except InvalidRequestError as exc:
        raise engine_error(exc) from None
    started = time.perf_counter()
    try:
        ids = await asyncio.to_thread(chat_token_ids, tokenizer, req)
    except ChatTemplateError as exc:
        raise invalid_request(f"messages: {exc}", param="messages") from None
    tokenize_s = time.perf_counter() - started
    max_tokens = output_limit(req, len(ids), max_model_len, "messages")
    children = [Child(i, ids, reading_tool_calls(sampling_params(req, max_tokens, i), plan)) for i in range(req.n)]
    return Prepared.of(req, request_id, children, tokenize_s, tool_calls=plan)


class Formatter:
    def __init__(self, tokenizer: Tokenizer, prepared: Prepared) -> None:
        self._tokenizer = tokenizer
        self._id = f"chatcmpl-{prepared.request_id}"
        self._model = prepared.model
        plan = prepared.tool_calls
        self._tools = [ToolCallStream(plan) for _ in prepared.children] if plan is not None else None

    def _chunk(self, choices: list[ChatStreamChoice]) -> ChatCompletionStreamResponse:
        return ChatCompletionStreamResponse(id=self._id, model=self._model, choices=choices)

    def opening(self, outcome: Outcome) -> str:
        """OpenAI opens each choice with a delta that only names the role."""
        return "".join(
            sse_event(self._chunk([ChatStreamChoice(index=c.index, delta=ChatDelta(role="assistant", content=""))]))
            for c in outcome.choices
        )

    def chunk(self, delta: Delta, choice: ChoiceState) -> str:
        finish_reason = delta.finish_reason if delta.finished else None
        calls: list[DeltaToolCall] = []
        if self._tools is None:
            content = delta.text
        else:
            tools = self._tools[delta.index]
            content, calls = tools.update(choice.text, delta.finished)
            finish_reason = tools.finish_reason(finish_reason)
        if not content and not calls and not delta.finished and not delta.logprobs:
            return ""
        out = ChatStreamChoice(
            index=delta.index,
            delta=ChatDelta(content=(content or None) if calls else content, tool_calls=calls or None)
            if content or calls or not delta.finished
            else ChatDelta(),
            logprobs=chat_logprobs(self._tokenizer, delta.logprobs) if delta.logprobs else None,
            finish_reason=finish_reason,
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
                message=self._message(c),
                logprobs=chat_logprobs(self._tokenizer, c.logprobs) if c.logprobs else None,
                finish_reason=self._finish_reason(c),
                stop_reason=c.stop_reason,
            )
            for c in outcome.choices
        ]
        return ChatCompletionResponse(id=self._id, model=self._model, choices=choices, usage=outcome.usage())

    def _message(self, choice: ChoiceState) -> ChatResponseMessage:
        if self._tools is None:
            return ChatResponseMessage(content=choice.text)
        tools = self._tools[choice.index]
        tools.update(choice.text, final=True)
        return ChatResponseMessage(content=tools.message_content(), tool_calls=tools.tool_calls())

    def _finish_reason(self, choice: ChoiceState) -> str | None:
        return (
            choice.finish_reason
            if self._tools is None
            else self._tools[choice.index].finish_reason(choice.finish_reason)
        )


class Endpoint:
    """``/v1/chat/completions`` with the server's tool-call settings (``--tool-call-parser``,
    ``--enable-auto-tool-choice``)."""

    Formatter = Formatter

    def __init__(self, tools: ToolParserSettings) -> None:
        self.tools = tools

    async def prepare(
        self, req: ChatCompletionRequest, request_id: str, tokenizer: Tokenizer, max_model_len: int
    ) -> Prepared:
        return await prepare(req, request_id, tokenizer, max_model_len, self.tools)
