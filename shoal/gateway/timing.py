"""Stage timings of one request, for the ``Server-Timing`` header and the request's log line."""

from __future__ import annotations

import time


class StageTimer:
    """Marks the end of each stage; a stage's duration is the time since the previous mark."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self._last = self.start
        self.stages: dict[str, float] = {}

    def mark(self, stage: str) -> float:
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + (now - self._last)
        self._last = now
        return now

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def header(self) -> str:
        """``Server-Timing`` value: ``auth;dur=0.012, route;dur=0.030`` (milliseconds)."""
        return ", ".join(f"{name};dur={seconds * 1000:.3f}" for name, seconds in self.stages.items())

    def as_ms(self) -> dict[str, float]:
        return {name: round(seconds * 1000, 3) for name, seconds in self.stages.items()}
