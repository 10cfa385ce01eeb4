"""A bounded buffer between the engine's step thread and one HTTP response.

The step thread must never wait for a client: a reader that takes a token a second would otherwise pace the
whole batch. So the buffer never blocks its writer. It keeps up to ``capacity`` pending deltas; once full, a
new delta is merged into the newest pending delta of the same choice (token ids, text and logprobs
concatenated, finish fields taken from the newer one), the way vLLM's output collector coalesces. A slow
reader then receives fewer, larger chunks and memory stays bounded by ``capacity + n`` deltas.

It lives on the event loop: the step thread hands outputs over with ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field, replace

from shoal.engine.core.outputs import RequestMetrics, RequestOutput, SampleLogprobs


@dataclass
class Delta:
    """What one choice (``index``) of a request gained since the reader last looked."""

    index: int
    token_ids: list[int]
    text: str
    logprobs: list[SampleLogprobs] | None
    finished: bool
    finish_reason: str | None
    stop_reason: str | int | None
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    metrics: RequestMetrics

    @classmethod
    def from_output(cls, index: int, out: RequestOutput) -> Delta:
        return cls(
            index=index,
            token_ids=list(out.new_token_ids),
            text=out.new_text,
            logprobs=list(out.new_logprobs) if out.new_logprobs is not None else None,
            finished=out.finished,
            finish_reason=out.finish_reason,
            stop_reason=out.stop_reason,
            num_prompt_tokens=out.num_prompt_tokens,
            num_cached_tokens=out.num_cached_tokens,
            num_output_tokens=out.num_output_tokens,
            metrics=out.metrics,
        )

    def merged_with(self, later: Delta) -> Delta:
        """This delta followed by ``later`` (same choice) as one."""
        logprobs = None
        if self.logprobs is not None or later.logprobs is not None:
            logprobs = (self.logprobs or []) + (later.logprobs or [])
        return replace(
            later, token_ids=self.token_ids + later.token_ids, text=self.text + later.text, logprobs=logprobs
        )


class StreamFailed(Exception):
    """The engine could not finish this request (it crashed or refused it after admission)."""


class StreamRefused(StreamFailed):
    """The server drains and this request had no output yet: it is answered 503, which a gateway retries elsewhere."""


@dataclass
class RequestStream:
    """Pending deltas of every choice of one HTTP request, bounded and coalescing."""

    num_choices: int
    capacity: int = 64
    _pending: deque[Delta] = field(default_factory=deque)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _unfinished: set[int] = field(default_factory=set)
    _error: BaseException | None = None
    started: bool = False  # a delta has arrived: the response may have begun

    def __post_init__(self) -> None:
        self._unfinished = set(range(self.num_choices))

    @property
    def finished(self) -> bool:
        return not self._unfinished

    def unfinished_choices(self) -> set[int]:
        return set(self._unfinished)

    def put(self, delta: Delta) -> None:
        """Adds a delta without ever blocking; merges once ``capacity`` deltas are pending."""
        self.started = True
        if delta.finished:
            self._unfinished.discard(delta.index)
        if len(self._pending) >= self.capacity:
            for pos in range(len(self._pending) - 1, -1, -1):
                if self._pending[pos].index == delta.index:
                    self._pending[pos] = self._pending[pos].merged_with(delta)
                    self._ready.set()
                    return
        self._pending.append(delta)
        self._ready.set()

    def fail(self, error: BaseException) -> None:
        """The engine died (or refused it): the reader's next ``get`` raises once the pending deltas are taken."""
        self._error = error
        self._ready.set()

    def pending(self) -> int:
        return len(self._pending)

    async def get(self) -> list[Delta]:
        """Waits for, then takes, every pending delta (oldest first); raises if the engine failed it."""
        while not self._pending:
            if isinstance(self._error, StreamFailed):  # a refusal (``StreamRefused``) stays one
                raise self._error
            if self._error is not None:
                raise StreamFailed(str(self._error)) from self._error
            self._ready.clear()
            await self._ready.wait()
        batch = list(self._pending)
        self._pending.clear()
        return batch
