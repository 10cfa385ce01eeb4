"""``POST /v1/responses``: OpenAI's Responses API, one answer to a conversation, as a response object or its events.

The request is rendered as the chat it stands for (``ResponsesRequest.template_messages``: the instructions as a
system message, then the input) and runs as one choice of the chat path. Its answer is one ``message`` output item
with one ``output_text`` part. How it ended sets the status: a stop is ``completed``; the output limit (given, or
the rest of the context) is ``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens``; the server
aborting it (its shutdown grace period over) is ``failed``. A stream is OpenAI's event sequence, each event
numbered by ``sequence_number``: ``response.created``, ``response.in_progress``, ``response.output_item.added``
and ``response.content_part.added`` (these four with the first token, so that a stream's first byte is its first
token, as for chat), a ``response.output_text.delta`` per batch of text, then ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done`` and ``response.completed`` (or ``.incomplete``,
``.failed``), which carries the whole response with its usage. A finished response is kept in the engine's
``ResponseStore`` (unless ``store`` is false), where ``previous_response_id`` finds the conversation it continues.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from pydantic import BaseModel

from shoal.engine.server.async_engine import Child
from shoal.engine.server.logprobs import chat_logprobs
from shoal.engine.server.output_stream import Delta
from shoal.engine.server.request_params import output_limit, responses_sampling_params
from shoal.engine.server.response_store import ResponseStore
from shoal.engine.server.serving import ChoiceState, Outcome, Prepared
from shoal.protocol.errors import invalid_request
from shoal.protocol.openai_api import ChatTokenLogprob, now_s
from shoal.protocol.responses_api import (
    ContentPartEvent,
    IncompleteDetails,
    InputTokensDetails,
    LifecycleEvent,
    OutputItemEvent,
    OutputMessage,
    OutputText,
    ResponseError,
    ResponseEvent,
    ResponseObject,
    ResponsesRequest,
    ResponseStatus,
    ResponseUsage,
    TextDeltaEvent,
    TextDoneEvent,
    response_id,
)
from shoal.protocol.sse import sse_typed_event
from shoal.tokenizer import ChatTemplateError, Tokenizer, responses_token_ids

_STATUS: dict[str | None, ResponseStatus] = {"stop": "completed", "length": "incomplete", "abort": "failed"}
_ABORTED = "The server stopped before the response was complete; send the request again."


class Formatter:
    def __init__(self, tokenizer: Tokenizer, prepared: Prepared) -> None:
        assert isinstance(prepared.request, ResponsesRequest)
        self._tokenizer = tokenizer
        self._request = prepared.request
        self._id = response_id(prepared.request_id)
        self._item_id = f"msg_{prepared.request_id}"
        self._model = prepared.model
        self._created = now_s()
        self._sequence = itertools.count()

    def _sse(self, event: type[ResponseEvent], event_type: str, **fields: object) -> str:
        """The next event of the stream, numbered."""
        payload = event(type=event_type, sequence_number=next(self._sequence), **fields)
        return sse_typed_event(payload, event_type)

    def _logprobs(self, choice: ChoiceState | Delta) -> list[ChatTokenLogprob]:
        samples = choice.logprobs or []
        return (chat_logprobs(self._tokenizer, samples).content or []) if samples else []

    def _text(self, choice: ChoiceState) -> OutputText:
        wanted = self._request.logprobs() is not None
        return OutputText(text=choice.text, logprobs=self._logprobs(choice) if wanted else None)

    def _message(self, choice: ChoiceState | None) -> OutputMessage:
        if choice is None:
            return OutputMessage(id=self._item_id, status="in_progress", content=[])
        status = "completed" if choice.finish_reason == "stop" else "incomplete"
        return OutputMessage(id=self._item_id, status=status, content=[self._text(choice)])

    def _object(self, outcome: Outcome | None) -> ResponseObject:
        """The response: in progress (``outcome`` None), or as its one choice ended."""
        req = self._request
        fmt = req.text.format if req.text is not None else None
        started = ResponseObject(
            id=self._id,
            created_at=self._created,
            status="in_progress",
            instructions=req.instructions,
            max_output_tokens=req.max_output_tokens,
            metadata=req.metadata or {},
            model=self._model,
            parallel_tool_calls=req.parallel_tool_calls is not False,
            previous_response_id=req.previous_response_id,
            store=req.store is not False,
            temperature=1.0 if req.temperature is None else req.temperature,
            text={"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
            tool_choice=req.tool_choice if isinstance(req.tool_choice, str) else "auto",
            top_logprobs=req.top_logprobs,
            top_p=1.0 if req.top_p is None else req.top_p,
            user=req.user,
        )
        if outcome is None:
            return started
        choice = outcome.choices[0]
        status = _STATUS.get(choice.finish_reason, "failed")
        usage = outcome.usage()
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        ended = {
            "status": status,
            "completed_at": now_s() if status == "completed" else None,
            "error": ResponseError(message=_ABORTED) if status == "failed" else None,
            "incomplete_details": IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None,
            "output": [self._message(choice)],
            "usage": ResponseUsage(
                input_tokens=usage.prompt_tokens,
                input_tokens_details=InputTokensDetails(cached_tokens=cached),
                output_tokens=usage.completion_tokens,
                total_tokens=usage.total_tokens,
            ),
        }
        return started.model_copy(update=ended)

    def opening(self, outcome: Outcome) -> str:
        place = {"item_id": self._item_id, "output_index": 0, "content_index": 0}
        return "".join(
            (
                self._sse(LifecycleEvent, "response.created", response=self._object(None)),
                self._sse(LifecycleEvent, "response.in_progress", response=self._object(None)),
                self._sse(OutputItemEvent, "response.output_item.added", output_index=0, item=self._message(None)),
                self._sse(ContentPartEvent, "response.content_part.added", part=OutputText(text=""), **place),
            )
        )

    def chunk(self, delta: Delta, choice: ChoiceState) -> str:
        if not delta.text and not delta.logprobs:
            return ""
        return self._sse(
            TextDeltaEvent,
            "response.output_text.delta",
            item_id=self._item_id,
            output_index=0,
            content_index=0,
            delta=delta.text,
            logprobs=self._logprobs(delta),
        )

    def closing(self, outcome: Outcome) -> str:
        final = self._object(outcome)
        choice = outcome.choices[0]
        place = {"item_id": self._item_id, "output_index": 0, "content_index": 0}
        return "".join(
            (
                self._sse(
                    TextDoneEvent,
                    "response.output_text.done",
                    text=choice.text,
                    logprobs=self._logprobs(choice),
                    **place,
                ),
                self._sse(ContentPartEvent, "response.content_part.done", part=self._text(choice), **place),
                self._sse(OutputItemEvent, "response.output_item.done", output_index=0, item=self._message(choice)),
                self._sse(LifecycleEvent, f"response.{final.status}", response=final),
            )
        )

    def response(self, outcome: Outcome) -> BaseModel:
        return self._object(outcome)


class Endpoint:
    """``/v1/responses`` over one engine's store of finished responses (``response_store``)."""

    Formatter = Formatter

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    async def prepare(
        self, req: ResponsesRequest, request_id: str, tokenizer: Tokenizer, max_model_len: int
    ) -> Prepared:
        """Renders and tokenizes the conversation (off the event loop) into one engine request, to be stored once
        it finishes unless ``store`` is false."""
        history = self._history(req)
        started = time.perf_counter()
        try:
            ids = await asyncio.to_thread(responses_token_ids, tokenizer, req, history)
        except ChatTemplateError as exc:
            raise invalid_request(f"input: {exc}", param="input") from None
        tokenize_s = time.perf_counter() - started
        max_tokens = output_limit(req, len(ids), max_model_len, "input")
        child = Child(0, ids, responses_sampling_params(req, max_tokens))
        prepared = Prepared(request_id, req.model, [child], 1, tokenize_s, user=req.user, request=req)
        if req.store is not False:
            conversation = [*history, *req.input_messages()]
            prepared.on_complete = lambda outcome: self._keep(request_id, conversation, outcome)
        return prepared

    def _history(self, req: ResponsesRequest) -> list[dict[str, str]]:
        """The conversation ``previous_response_id`` continues, or a 400 when it is not (or no longer) stored."""
        if req.previous_response_id is None:
            return []
        history = self.store.get(req.previous_response_id)
        if history is None:
            raise invalid_request(
                f"previous_response_id: previous response with id {req.previous_response_id!r} not found (never "
                "stored, stored with store false, expired, or answered by another replica)",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return history

    def _keep(self, request_id: str, conversation: list[dict[str, str]], outcome: Outcome) -> None:
        choice = outcome.choices[0]
        if choice.finish_reason in ("stop", "length"):
            answer = {"role": "assistant", "content": choice.text}
            self.store.put(response_id(request_id), [*conversation, answer])
