"""Restart delays for a crashing engine: doubling from ``initial`` up to ``ceiling``, as a kubelet's
CrashLoopBackOff does, so a broken model does not spin the machine while a one-off crash recovers at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 1.0
    ceiling_s: float = 30.0

    def delay(self, failures: int) -> float:
        """Seconds to wait before the restart that follows ``failures`` crashes in a row (``failures >= 1``)."""
        return min(self.ceiling_s, self.initial_s * 2.0 ** max(0, failures - 1))
