"""Retrying: how long to wait after each failure, and how many attempts or seconds an operation may use.

One helper for every retry loop (the gateway's upstream attempts, its KV-event followers, its EndpointSlice
watch; a crashing local engine's restarts). ``Backoff`` is the pure schedule: capped exponential, the n-th
consecutive failure waits ``min(cap, initial * factor ** (n - 1))``, shortened by up to ``jitter`` of itself
at random so that many clients cut off together do not all come back in the same instant; a jittered delay
is never longer than the schedule's, so it never exceeds the cap. ``Retry`` is one operation's state: the
attempts it has started, an optional attempt limit and deadline (no attempt starts past either, and no wait
runs past the deadline), and the consecutive failures, reset by a success. Its clock, sleep and random draw
are injected, so tests and the simulator run it without waiting.

Hand-written rather than tenacity or backoff: both are decorator and iterator frameworks around a call; here
the loops keep their own per-attempt work (the proxy picks another replica, the follower re-syncs an index),
the proxy's attempts must not sleep and run on the request's hot path with the request's own deadline, and
what is needed is the forty lines below.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Capped exponential delays with jitter: ``initial_s``, then times ``factor`` per failure up to ``cap_s``."""

    initial_s: float
    cap_s: float
    factor: float = 2.0
    jitter: float = 0.0  # the fraction of a delay that may be taken off at random, in [0, 1]

    def __post_init__(self) -> None:
        if not 0 <= self.initial_s <= self.cap_s:
            raise ValueError(f"backoff needs 0 <= initial_s <= cap_s, got {self.initial_s} and {self.cap_s}")
        if self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError(f"backoff needs factor >= 1 and jitter in [0, 1], got {self.factor}, {self.jitter}")

    def base(self, failures: int) -> float:
        """The schedule's delay after ``failures`` consecutive failures (``failures >= 1``), before jitter."""
        steps = max(0, failures - 1)
        if self.initial_s == 0 or self.factor == 1:
            return self.initial_s
        if steps * math.log(self.factor) >= math.log(self.cap_s / self.initial_s):
            return self.cap_s  # also keeps factor ** steps from overflowing after a long outage
        return min(self.cap_s, self.initial_s * self.factor**steps)

    def delay(self, failures: int, draw: float) -> float:
        """The delay to wait, given a uniform random ``draw`` in [0, 1)."""
        return self.base(failures) * (1.0 - self.jitter * draw)


class Retry:
    """One retried operation: attempts started, failures in a row, and what budget it has left."""

    def __init__(
        self,
        backoff: Backoff | None = None,
        *,
        max_attempts: int | None = None,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.backoff = backoff
        self.max_attempts = max_attempts
        self.deadline = deadline  # on ``clock``
        self.attempts = 0
        self.failures = 0
        self._clock, self._sleep, self._draw = clock, sleep, draw

    def allows_another(self) -> bool:
        """True while neither the attempt limit nor the deadline is reached."""
        if self.max_attempts is not None and self.attempts >= self.max_attempts:
            return False
        return self.deadline is None or self._clock() < self.deadline

    def begin(self) -> None:
        """Counts an attempt as started."""
        self.attempts += 1

    def succeeded(self) -> None:
        """A success: the next failure waits the initial delay again."""
        self.failures = 0

    async def failed(self) -> None:
        """A failure: waits the backoff's next delay (no longer than the deadline leaves)."""
        self.failures += 1
        if self.backoff is None:
            return
        delay = self.backoff.delay(self.failures, self._draw())
        if self.deadline is not None:
            delay = min(delay, max(0.0, self.deadline - self._clock()))
        if delay > 0:
            await self._sleep(delay)
