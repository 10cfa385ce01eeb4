"""The extreme of a value over a sliding time window, in O(1) amortized per sample.

Stabilization windows are "the largest replica count recommended over the last 300 s" (scale-down) or "the
smallest over the last few seconds" (scale-up); the simulator calls the policy every simulated second for days,
so the window keeps a monotone deque instead of scanning its whole history each time.
"""

from __future__ import annotations

from collections import deque


class WindowExtreme:
    """Max (or min, ``largest=False``) of the values added in the last ``seconds`` seconds."""

    __slots__ = ("_largest", "_samples", "seconds")

    def __init__(self, seconds: float, largest: bool = True) -> None:
        self.seconds = seconds
        self._largest = largest
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, time: float, value: float) -> float:
        """Adds ``value`` seen at ``time`` and returns the extreme over the window ending at ``time``."""
        samples = self._samples
        if self._largest:
            while samples and samples[-1][1] <= value:
                samples.pop()
        else:
            while samples and samples[-1][1] >= value:
                samples.pop()
        samples.append((time, value))
        horizon = time - self.seconds
        while samples[0][0] < horizon:
            samples.popleft()
        return samples[0][1]
