"""Runs one admitted OpenAI request to the end, as one JSON response or as server-sent events.

Every generation endpoint shares this path; an endpoint only supplies a ``Formatter`` (its stream's events and
its final response). Whatever way a request ends (finished, time limit, client gone, engine failure),
``Generation.close`` runs (aborting what is unfinished so its KV blocks are freed at the next step) and one
structured log line records its stages. A non-streaming request watches for the client's disconnect while
it waits, so an abandoned request is aborted as promptly as a streaming one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from shoal.engine.core.outputs import RequestMetrics, SampleLogprobs
from shoal.engine.server.async_engine import Child, Generation
from shoal.engine.server.output_stream import Delta, StreamFailed, StreamRefused
from shoal.engine.server.request_params import OpenAIRequest, SamplingRequest
from shoal.engine.tool_parsers import ToolCallPlan
from shoal.protocol.errors import internal_error, service_unavailable
from shoal.protocol.openai_api import PromptTokensDetails, UsageInfo
from shoal.protocol.sse import DONE, sse_event
from shoal.tokenizer import Tokenizer

request_log = logging.getLogger("shoal.engine.server.requests")
T = TypeVar("T")


@dataclass
class Prepared:
    """A validated, tokenized request ready for the engine."""

    request_id: str
    model: str
    children: list[Child]
    n: int
    tokenize_s: float
    include_usage: bool = False
    user: str | None = None  # the client's end-user id (OpenAI's ``user``), for the request's log line
    echoes: list[str] = field(default_factory=list)  # completions' echo: the prompt text each choice opens with
    request: OpenAIRequest | None = None  # what a formatter echoes of the request (the Responses API's settings)
    on_complete: Callable[[Outcome], None] | None = None  # run once every choice finished (responses: store it)
    tool_calls: ToolCallPlan | None = None  # chat and responses: how its output is read for tool calls

    @classmethod
    def of(
        cls,
        req: SamplingRequest,
        request_id: str,
        children: list[Child],
        tokenize_s: float,
        echoes: list[str] | None = None,
        tool_calls: ToolCallPlan | None = None,
    ) -> Prepared:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return cls(
            request_id,
            req.model,
            children,
            req.n,
            tokenize_s,
            include_usage,
            req.user,
            echoes or [],
            req,
            tool_calls=tool_calls,
        )


@dataclass
class ChoiceState:
    """Everything one choice produced so far."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[SampleLogprobs] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    metrics: RequestMetrics | None = None

    def update(self, delta: Delta) -> None:
        self.text += delta.text
        self.token_ids += delta.token_ids
        self.logprobs += delta.logprobs or []
        self.finish_reason = delta.finish_reason
        self.stop_reason = delta.stop_reason
        self.num_prompt_tokens = delta.num_prompt_tokens
        self.num_cached_tokens = delta.num_cached_tokens
        self.metrics = delta.metrics


class Outcome:
    """The choices of one request and what they add up to."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self.choices = [ChoiceState(i) for i in range(len(prepared.children))]
        self.status = "ok"

    def update(self, delta: Delta) -> ChoiceState:
        choice = self.choices[delta.index]
        choice.update(delta)
        return choice

    def usage(self) -> UsageInfo:
        """Each prompt counts once however many choices it has (as in OpenAI's and vLLM's usage)."""
        firsts = self.choices[:: self.prepared.n]
        prompt = sum(c.num_prompt_tokens for c in firsts)
        completion = sum(len(c.token_ids) for c in self.choices)
        cached = sum(c.num_cached_tokens for c in firsts)
        return UsageInfo(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        )

    def stages(self) -> dict[str, float]:
        """Stage durations in seconds of the choice that finished last (the one the client waited for)."""
        stages = {"tokenize": self.prepared.tokenize_s}
        done = [c.metrics for c in self.choices if c.metrics is not None]
        if done:
            last = max(done, key=lambda m: m.finished_time or m.last_token_time or m.arrival_time)
            for name, value in (
                ("queue", last.queue_time),
                ("prefill", last.prefill_time),
                ("decode", last.decode_time),
                ("e2e", last.e2e_time),
            ):
                if value is not None:
                    stages[name] = value
        return stages

    def server_timing(self) -> str:
        return ", ".join(f"{name};dur={seconds * 1000:.2f}" for name, seconds in self.stages().items())

    def log(self) -> None:
        """One structured line per finished request."""
        usage = self.usage()
        request_log.info(
            json.dumps(
                {
                    "event": "request_finished",
                    "request_id": self.prepared.request_id,
                    "user": self.prepared.user,
                    "status": self.status,
                    "finish_reasons": [c.finish_reason for c in self.choices],
                    "prompt_tokens": usage.prompt_tokens,
                    "cached_tokens": usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0,
                    "completion_tokens": usage.completion_tokens,
                    **{f"{k}_ms": round(v * 1000, 2) for k, v in self.stages().items()},
                }
            )
        )


class Formatter(Protocol):
    """How an endpoint shapes its output: its stream's events, already written as SSE ("" for none), and its
    whole response."""

    def opening(self, outcome: Outcome) -> str: ...

    def chunk(self, delta: Delta, choice: ChoiceState) -> str: ...

    def closing(self, outcome: Outcome) -> str: ...

    def response(self, outcome: Outcome) -> BaseModel: ...


OutputFormatter = Formatter  # the protocol, by a name an endpoint's own ``Formatter`` attribute does not shadow


class Endpoint(Protocol):
    """A generation endpoint (a module, or an object where it holds state): its request prepared for the engine,
    and the ``Formatter`` of its output."""

    @property
    def Formatter(self) -> Callable[[Tokenizer, Prepared], OutputFormatter]: ...  # read-only: covariant

    async def prepare(self, req: Any, request_id: str, tokenizer: Tokenizer, max_model_len: int) -> Prepared: ...


def chunks_closing(outcome: Outcome, usage_chunk: Callable[[UsageInfo], BaseModel]) -> str:
    """How a completions or chat stream ends: the usage chunk if the client asked for it, then ``[DONE]``."""
    usage = sse_event(usage_chunk(outcome.usage())) if outcome.prepared.include_usage else ""
    return usage + DONE


class ClosingStreamingResponse(StreamingResponse):
    """A streaming response that runs ``on_close`` however it ends, even if its body never started."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None], **kwargs: object) -> None:
        super().__init__(content, **kwargs)  # type: ignore[arg-type]
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


def finish(generation: Generation, outcome: Outcome) -> None:
    """Ends a request: aborts what is unfinished, names how it ended, logs it. Idempotent."""
    if generation.closed:
        return
    if generation.timed_out:
        outcome.status = "timeout"
    elif outcome.status == "ok" and not generation.stream.finished:
        outcome.status = "cancelled"
    elif outcome.status == "ok" and any(c.finish_reason == "abort" for c in outcome.choices):
        outcome.status = "aborted"  # by the server: shutdown grace period over
    elif outcome.status == "ok" and outcome.prepared.on_complete is not None:
        outcome.prepared.on_complete(outcome)
    generation.close()
    outcome.log()


async def respond(
    request: Request, generation: Generation, prepared: Prepared, formatter: Formatter, stream: bool
) -> Response:
    outcome = Outcome(prepared)
    if stream:
        try:
            first = await _first_batch(request, generation)
        except StreamRefused as refused:
            outcome.status = "refused"
            finish(generation, outcome)
            raise service_unavailable(str(refused), retry_after_s=1) from None
        if first is None:
            finish(generation, outcome)
            return Response(status_code=499)  # nobody is listening; the status only shows in access logs
        return ClosingStreamingResponse(
            _events(generation, outcome, formatter, first),
            on_close=lambda: finish(generation, outcome),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    try:
        finished = await _collect_unless_disconnected(request, generation, outcome)
    except StreamRefused as refused:
        outcome.status = "refused"
        raise service_unavailable(str(refused), retry_after_s=1) from None
    except StreamFailed:
        outcome.status = "error"
        raise internal_error() from None
    finally:
        finish(generation, outcome)
    if not finished:
        return Response(status_code=499)  # nobody is listening; the status only shows in access logs
    return JSONResponse(formatter.response(outcome).model_dump(), headers={"Server-Timing": outcome.server_timing()})


async def _first_batch(request: Request, generation: Generation) -> list[Delta] | StreamFailed | None:
    """The first output, awaited before any header goes out (None if the client left first; an engine failure
    is returned, for the stream to report), so that a request refused while it waited (``StreamRefused``) can
    still be answered 503, which a gateway retries on another replica."""
    work = await _unless_disconnected(request, anext(aiter(generation)))
    if work is None:
        return None
    try:
        return work.result()
    except StreamRefused:
        raise
    except StreamFailed as failed:
        return failed


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> asyncio.Future[T] | None:
    """Runs ``work`` to its end, returned as a finished future, or None as soon as the client disconnects."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watch):
            pending.cancel()
    return task if task.done() and not task.cancelled() else None


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _from(first: list[Delta] | StreamFailed, generation: Generation) -> AsyncIterator[list[Delta]]:
    if isinstance(first, StreamFailed):
        raise first
    yield first
    async for batch in generation:
        yield batch


async def _events(
    generation: Generation, outcome: Outcome, formatter: Formatter, first: list[Delta] | StreamFailed
) -> AsyncIterator[str]:
    """The stream's events from its first output on. The response, headers and opening events included, starts
    with the first token, not before it, so that a stream's first byte is its first token: what a gateway's
    time-to-first-token limit watches, and until which it may still retry the request elsewhere."""
    opening = formatter.opening(outcome)
    try:
        async for batch in _from(first, generation):
            for delta in batch:
                choice = outcome.update(delta)
                chunk = formatter.chunk(delta, choice)
                if chunk:
                    yield opening + chunk
                    opening = ""
    except StreamFailed:
        outcome.status = "error"
        yield sse_event(internal_error().body())
        return
    closing = opening + formatter.closing(outcome)
    finish(generation, outcome)  # before the last event: a client following up on it finds the response stored
    yield closing


async def _collect_unless_disconnected(request: Request, generation: Generation, outcome: Outcome) -> bool:
    """Reads the whole generation; returns False as soon as the client disconnects instead."""

    async def collect() -> None:
        async for batch in generation:
            for delta in batch:
                outcome.update(delta)

    work = await _unless_disconnected(request, collect())
    if work is None:
        return False
    work.result()  # re-raises StreamFailed
    return True
