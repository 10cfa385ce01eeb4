"""Streaming chat clients through the official ``openai`` client, each in a thread, one request after another
until stopped: the load ``bench/startup.py`` and ``bench/overload.py`` put on a ``shoal up`` fleet."""

from __future__ import annotations

import threading
import time

import openai


class ChatLoad:
    """``clients`` threads, each streaming a chat request of ``max_tokens``, then pausing ``pause_s`` (0: a closed
    loop). ``prompt`` is formatted with ``client`` and ``turn``. Kept: requests completed, each one's time to
    first token, and each failure's status and message."""

    def __init__(
        self,
        url: str,
        model: str,
        clients: int,
        max_tokens: int,
        prompt: str,
        pause_s: float = 0.0,
        timeout_s: float = 120.0,
    ) -> None:
        self.api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=timeout_s)
        self.model, self.max_tokens, self.prompt, self.pause_s = model, max_tokens, prompt, pause_s
        self.timeout_s = timeout_s
        self.completed = 0
        self.ttfts: list[float] = []
        self.failures: list[str] = []
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(clients)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s)

    def _loop(self, client: int) -> None:
        turn = 0
        while not self._stop.is_set():
            turn += 1
            sent, first = time.monotonic(), None
            try:
                stream = self.api.chat.completions.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    stream=True,
                    messages=[{"role": "user", "content": self.prompt.format(client=client, turn=turn)}],
                )
                for chunk in stream:
                    if first is None and chunk.choices and chunk.choices[0].delta.content:
                        first = time.monotonic() - sent
                with self._lock:
                    self.completed += 1
                    if first is not None:
                        self.ttfts.append(first)
            except openai.OpenAIError as error:
                status = getattr(error, "status_code", None) or type(error).__name__
                with self._lock:
                    self.failures.append(f"{status} after {time.monotonic() - sent:.0f} s: {str(error)[:160]}")
            self._stop.wait(self.pause_s)
