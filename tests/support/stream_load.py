"""Steady streaming load from the official ``openai`` client, every outcome counted: the lossless scale-in tests'
load (``shoal up``'s in tests/local, the operator's on the test bed in tests/operator); and stream lengths sized
in seconds at the engine's measured rate, since a fixed token count that outlasts a drain on one CPU ends before
it on a faster one."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import openai


@dataclass
class StreamLoad:
    """``clients`` threads streaming chats back to back until stopped; each outcome is counted."""

    url: str
    clients: int
    model: str
    max_tokens: int
    api_key: str = field(default="unused", repr=False)
    completed: int = 0
    failures: list[str] = field(default_factory=list)
    finished_at: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _last_start: float | None = None  # set by ``stop(after=...)``: each client ends with a request begun after it
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(self.clients)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        api = openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key, max_retries=0, timeout=120)
        while not self._stop.is_set():
            began = time.monotonic()
            self._one(api)
            if self._last_start is not None and began > self._last_start:
                return

    def _one(self, api: openai.OpenAI) -> None:
        """A stream is whole when its one choice ends with finish_reason ``length`` after all ``max_tokens``
        tokens (``ignore_eos``) and the usage chunk follows; anything else (an exception, an error event, a stream
        cut short) is a failure."""
        try:
            chunks = list(
                api.chat.completions.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    messages=[{"role": "user", "content": "Tell me about the sea."}],
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True},
                )
            )
            reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            usage = chunks[-1].usage if chunks else None
            if reasons != ["length"] or usage is None or usage.completion_tokens != self.max_tokens:
                self.failures.append(f"truncated: finish_reasons {reasons}, usage {usage}")
                return
            self.completed += 1
            self.finished_at.append(time.monotonic())
        except Exception as error:  # noqa: BLE001 - every failure is the finding
            self.failures.append(repr(error))

    def stop(self, after: float | None = None) -> None:
        """Waits for every client to end: at once after its current request, or, with ``after`` (a
        ``time.monotonic()``), after its first request begun later than that."""
        if after is None:
            self._stop.set()
        self._last_start = after
        for thread in self._threads:
            thread.join(timeout=180)

    def summary(self) -> str:
        """The counts, for the test's output and its failure message."""
        return f"{self.completed} whole, {len(self.failures)} failed or truncated: {self.failures[:5]}"


def tokens_for_seconds(url: str, model: str, seconds: float, least: int, most: int, api_key: str = "unused") -> int:
    """``max_tokens`` for a stream of about ``seconds`` at a lone request's rate, timed on one 32-token chat (its
    time to first token included, so the rate is on the slow side and the stream on the long side), within
    ``least``..``most`` (``most`` within the engine's context)."""
    api = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=120)
    began = time.monotonic()
    api.chat.completions.create(
        model=model, max_tokens=32, messages=[{"role": "user", "content": "Hello"}], extra_body={"ignore_eos": True}
    )
    per_token = (time.monotonic() - began) / 32
    return max(least, min(most, math.ceil(seconds / per_token)))
