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

With function tools the output is read as chat reads it (the same ``ToolCallPlan`` and ``ToolCallStream``): the
text before the calls is the message item (none when it is only whitespace), then each call is a ``function_call``
item. Streamed, the message item opens with its first visible text (not with the first token) and closes when the
first call starts; each call's item is added once its name is complete, its arguments follow as
``response.function_call_arguments.delta`` events, and ``.done`` and ``response.output_item.done`` close it when the
next call starts or the output ends. The stored answer names the calls by the ids the client was given (the
reader is seeded by the request id), so a ``function_call_output`` sent after ``previous_response_id`` answers them.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Literal

from pydantic import BaseModel

from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.server.async_engine import Child
from shoal.engine.server.logprobs import chat_logprobs
from shoal.engine.server.output_stream import Delta
from shoal.engine.server.request_params import (
    engine_error,
    output_limit,
    reading_tool_calls,
    responses_sampling_params,
)
from shoal.engine.server.response_store import ResponseStore
from shoal.engine.server.serving import ChoiceState, Outcome, Prepared
from shoal.engine.tool_parsers import ToolCallStream, ToolParserSettings, plan_tool_calls
from shoal.protocol.errors import invalid_request
from shoal.protocol.openai_api import ChatMessage, ChatTokenLogprob, now_s
from shoal.protocol.responses_api import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    ContentPartEvent,
    IncompleteDetails,
    InputTokensDetails,
    LifecycleEvent,
    OutputFunctionCall,
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
from shoal.protocol.tools import DeltaToolCall, ToolCall
from shoal.tokenizer import ChatTemplateError, Tokenizer, responses_token_ids

_STATUS: dict[str | None, ResponseStatus] = {"stop": "completed", "length": "incomplete", "abort": "failed"}
_ABORTED = "The server stopped before the response was complete; send the request again."
ItemStatus = Literal["in_progress", "completed", "incomplete"]


def answer_reader(prepared: Prepared) -> ToolCallStream | None:
    """What reads the answer's calls, if its tools may make any; seeded by the request, so that the stream's reader
    and the store's name the calls alike."""
    plan = prepared.tool_calls
    return ToolCallStream(plan, seed=prepared.request_id) if plan is not None else None


def _tool_choice(req: ResponsesRequest) -> str | dict[str, Any]:
    """``tool_choice`` as OpenAI echoes it: a mode, or the named function."""
    choice = req.tool_choice
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else choice.model_dump()


class Formatter:
    def __init__(self, tokenizer: Tokenizer, prepared: Prepared) -> None:
        assert isinstance(prepared.request, ResponsesRequest)
        self._tokenizer = tokenizer
        self._request = prepared.request
        self._request_id = prepared.request_id
        self._id = response_id(prepared.request_id)
        self._item_id = f"msg_{prepared.request_id}"
        self._model = prepared.model
        self._created = now_s()
        self._sequence = itertools.count()
        self._calls = answer_reader(prepared)
        self._items = 0  # output items the stream opened so far
        self._message_at: int | None = None  # the stream's message item, once opened
        self._calls_at: list[int] = []  # the stream's function call items, in order
        self._held = ""  # content not streamed yet: whitespace before what may be only calls
        self._streamed = ""  # the message text streamed

    def _sse(self, event: type[ResponseEvent], event_type: str, **fields: object) -> str:
        """The next event of the stream, numbered."""
        payload = event(type=event_type, sequence_number=next(self._sequence), **fields)
        return sse_typed_event(payload, event_type)

    def _logprobs(self, choice: ChoiceState | Delta) -> list[ChatTokenLogprob]:
        samples = choice.logprobs or []
        return (chat_logprobs(self._tokenizer, samples).content or []) if samples else []

    def _text(self, choice: ChoiceState, text: str) -> OutputText:
        wanted = self._request.logprobs() is not None
        return OutputText(text=text, logprobs=self._logprobs(choice) if wanted else None)

    def _message(self, choice: ChoiceState | None, text: str = "", done: bool = False) -> OutputMessage:
        if choice is None:
            return OutputMessage(id=self._item_id, status="in_progress", content=[])
        status = "completed" if done or choice.finish_reason == "stop" else "incomplete"
        return OutputMessage(id=self._item_id, status=status, content=[self._text(choice, text)])

    def _call_item_id(self, k: int) -> str:
        return f"fc_{self._request_id}_{k}"

    def _call(self, k: int, call: ToolCall, status: ItemStatus) -> OutputFunctionCall:
        name, arguments = call.function.name, call.function.arguments
        return OutputFunctionCall(
            id=self._call_item_id(k), call_id=call.id, name=name, arguments=arguments, status=status
        )

    def _output(self, choice: ChoiceState) -> list[OutputMessage | OutputFunctionCall]:
        """The message (the text before any calls; none when there is only whitespace before them), then the
        calls; the last item is incomplete when the output limit cut it."""
        if self._calls is None:
            return [self._message(choice, choice.text)]
        self._calls.update(choice.text, final=True)
        calls = self._calls.tool_calls() or []
        content = self._calls.message_content()
        last: ItemStatus = "completed" if choice.finish_reason == "stop" else "incomplete"
        message = [self._message(choice, content or "", done=bool(calls))] if content is not None or not calls else []
        return [
            *message,
            *(self._call(k, c, last if k == len(calls) - 1 else "completed") for k, c in enumerate(calls)),
        ]

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
            tool_choice=_tool_choice(req),
            tools=[t.model_dump(exclude_none=True) for t in req.tools or []],
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
            "output": self._output(choice),
            "usage": ResponseUsage(
                input_tokens=usage.prompt_tokens,
                input_tokens_details=InputTokensDetails(cached_tokens=cached),
                output_tokens=usage.completion_tokens,
                total_tokens=usage.total_tokens,
            ),
        }
        return started.model_copy(update=ended)

    def opening(self, outcome: Outcome) -> str:
        opened = "".join(
            self._sse(LifecycleEvent, f"response.{stage}", response=self._object(None))
            for stage in ("created", "in_progress")
        )
        return opened + (self._open_message() if self._calls is None else "")

    def chunk(self, delta: Delta, choice: ChoiceState) -> str:
        if self._calls is not None:
            return self._tool_events(choice, *self._calls.update(choice.text, delta.finished))
        if not delta.text and not delta.logprobs:
            return ""
        return self._text_delta(delta.text, self._logprobs(delta))

    def closing(self, outcome: Outcome) -> str:
        choice = outcome.choices[0]
        events = ""
        if self._calls is not None:
            events = self._tool_events(choice, *self._calls.update(choice.text, final=True))
            if self._message_at is None and not self._calls_at:  # no calls: the text, however blank
                events += self._open_message() + self._flush()
        final = self._object(outcome)
        if self._calls_at:
            events += self._close_call(len(self._calls_at) - 1, final.output[-1].status)
        else:
            events += self._close_message(choice, done=False)
        return events + self._sse(LifecycleEvent, f"response.{final.status}", response=final)

    def response(self, outcome: Outcome) -> BaseModel:
        return self._object(outcome)

    # ---- a stream's output items, opened as the text shows them --------------------------------------------

    def _place(self) -> dict[str, object]:
        return {"item_id": self._item_id, "output_index": self._message_at, "content_index": 0}

    def _open_message(self) -> str:
        self._message_at, self._items = self._items, self._items + 1
        added = self._sse(
            OutputItemEvent, "response.output_item.added", output_index=self._message_at, item=self._message(None)
        )
        part = self._sse(ContentPartEvent, "response.content_part.added", part=OutputText(text=""), **self._place())
        return added + part

    def _text_delta(self, text: str, logprobs: list[ChatTokenLogprob]) -> str:
        self._streamed += text
        return self._sse(TextDeltaEvent, "response.output_text.delta", delta=text, logprobs=logprobs, **self._place())

    def _flush(self) -> str:
        held, self._held = self._held, ""
        return self._text_delta(held, []) if held else ""

    def _close_message(self, choice: ChoiceState, done: bool) -> str:
        """The message's last events; ``done``: calls follow it, so it is complete whatever ended the output."""
        text = choice.text if self._calls is None else self._streamed
        logprobs = self._logprobs(choice) if self._calls is None else []
        place = self._place()
        message = self._message(choice, text, done)
        return "".join(
            (
                self._sse(TextDoneEvent, "response.output_text.done", text=text, logprobs=logprobs, **place),
                self._sse(ContentPartEvent, "response.content_part.done", part=message.content[0], **place),
                self._sse(OutputItemEvent, "response.output_item.done", output_index=self._message_at, item=message),
            )
        )

    def _tool_events(self, choice: ChoiceState, content: str, deltas: list[DeltaToolCall]) -> str:
        """Content into the message item (opened once it is more than whitespace), each call into an item of
        its own: added with its name, its arguments as deltas, done when the next one starts or the output ends."""
        assert self._calls is not None
        events = ""
        self._held += content
        if self._message_at is None and self._held.strip():
            events += self._open_message()
        if self._message_at is not None and not self._calls_at:
            events += self._flush()
        for delta in deltas:
            if delta.id is not None:  # a call starts
                if self._calls_at:
                    events += self._close_call(len(self._calls_at) - 1, "completed")
                elif self._message_at is not None:
                    events += self._close_message(choice, done=True)
                self._calls_at.append(self._items)
                self._items += 1
                item = OutputFunctionCall(
                    id=self._call_item_id(delta.index),
                    call_id=delta.id,
                    name=delta.function.name or "",
                    arguments="",
                    status="in_progress",
                )
                events += self._sse(
                    OutputItemEvent, "response.output_item.added", output_index=self._calls_at[-1], item=item
                )
            if delta.function.arguments:
                events += self._sse(
                    ArgumentsDeltaEvent,
                    "response.function_call_arguments.delta",
                    item_id=self._call_item_id(delta.index),
                    output_index=self._calls_at[delta.index],
                    delta=delta.function.arguments,
                )
        return events

    def _close_call(self, k: int, status: ItemStatus) -> str:
        assert self._calls is not None
        call = self._call(k, (self._calls.tool_calls() or [])[k], status)
        at = self._calls_at[k]
        return self._sse(
            ArgumentsDoneEvent,
            "response.function_call_arguments.done",
            item_id=call.id,
            output_index=at,
            arguments=call.arguments,
        ) + self._sse(OutputItemEvent, "response.output_item.done", output_index=at, item=call)


class Endpoint:
    """``/v1/responses`` over one engine's store of finished responses (``response_store``)."""

    Formatter = Formatter

    def __init__(self, store: ResponseStore, tools: ToolParserSettings | None = None) -> None:
        self.store = store
        self.tools = tools or ToolParserSettings()

    async def prepare(
        self, req: ResponsesRequest, request_id: str, tokenizer: Tokenizer, max_model_len: int
    ) -> Prepared:
        """Renders and tokenizes the conversation (off the event loop) into one engine request, to be stored once
        it finishes unless ``store`` is false."""
        history = self._history(req)
        try:
            plan = plan_tool_calls(req.tool_fields(), self.tools, tokenizer.chat_template)
        except InvalidRequestError as exc:
            raise engine_error(exc) from None
        started = time.perf_counter()
        try:
            ids = await asyncio.to_thread(responses_token_ids, tokenizer, req, history)
        except ChatTemplateError as exc:
            raise invalid_request(f"input: {exc}", param="input") from None
        tokenize_s = time.perf_counter() - started
        max_tokens = output_limit(req, len(ids), max_model_len, "input")
        child = Child(0, ids, reading_tool_calls(responses_sampling_params(req, max_tokens), plan))
        prepared = Prepared(request_id, req.model, [child], 1, tokenize_s, user=req.user, request=req, tool_calls=plan)
        if req.store is not False:
            conversation = [*history, *req.input_messages()]
            prepared.on_complete = lambda outcome: self._keep(prepared, conversation, outcome)
        return prepared

    def _history(self, req: ResponsesRequest) -> list[dict[str, Any]]:
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

    def _keep(self, prepared: Prepared, conversation: list[dict[str, Any]], outcome: Outcome) -> None:
        """Stores the conversation with its answer: the text, and the calls (under the ids the client got)."""
        choice = outcome.choices[0]
        if choice.finish_reason not in ("stop", "length"):
            return
        reader = answer_reader(prepared)
        if reader is None:
            answer = ChatMessage(role="assistant", content=choice.text)
        else:
            reader.update(choice.text, final=True)
            answer = ChatMessage(role="assistant", content=reader.message_content(), tool_calls=reader.tool_calls())
        self.store.put(response_id(prepared.request_id), [*conversation, answer.for_template()])
