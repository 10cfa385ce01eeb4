"""Per-tenant quotas: requests per minute, tokens per minute, concurrent requests.

Rates are counted in fixed one-minute windows (aligned to the clock, so every gateway replica sharing a Redis
agrees on the window). Tokens are charged twice over: at admission, an estimate of what the request may cost
(its prompt tokens plus the output it asks for, times ``n`` and the number of prompts: ``admission_estimate``),
so that a burst cannot overrun the limit before any request ends; then, when it ends, the charge is settled
with what the engine reports it used (``settlement``), so a tenant's tokens per minute are what it really used.
A request that ends without a usage report (cancelled, cut off) keeps its estimate. A rejection says which
limit and how long until it may pass (``Retry-After``): the rest of the window for the rates, a second for
concurrency. ``decide`` is the pure rule; ``MemoryQuota`` keeps the counters for a single gateway,
``shoal.gateway.quota_redis`` for several.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Literal, Protocol

WINDOW_SECONDS = 60.0
CONCURRENCY_RETRY_SECONDS = 1.0

LimitName = Literal["requests_per_minute", "tokens_per_minute", "max_concurrent", "quota_store_unavailable"]


@dataclass(frozen=True)
class Limits:
    """A tenant's quotas; ``None`` means unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None


@dataclass(frozen=True)
class Usage:
    """What a tenant has used in the current window, and its requests in flight."""

    requests: int = 0
    tokens: int = 0
    concurrent: int = 0


@dataclass(frozen=True)
class Admission:
    allowed: bool
    limit: LimitName | None = None
    retry_after: float = 0.0
    lease_id: str = ""
    tenant: str = ""
    window: int = 0  # the window the tokens were charged to
    tokens: int = 0  # the tokens charged: the estimate, until settled
    unmetered: bool = False  # admitted without the quota store (it could not be reached)

    @property
    def retry_after_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after)))


def window_of(now: float) -> tuple[int, float]:
    """The window's number and how many seconds are left in it."""
    number = int(now // WINDOW_SECONDS)
    return number, (number + 1) * WINDOW_SECONDS - now


def rejection(limit: LimitName, now: float) -> Admission:
    """A refusal by ``limit``, with how long until it may pass."""
    retry_after = CONCURRENCY_RETRY_SECONDS if limit == "max_concurrent" else window_of(now)[1]
    return Admission(False, limit, retry_after)


def admission_estimate(cost_tokens: int, output_tokens: int, sequences: int) -> int:
    """The tokens to charge at admission: ``cost_tokens`` counts the prompts and one output budget of
    ``output_tokens``; each of the ``sequences`` (``n`` per prompt) may generate a whole budget."""
    return cost_tokens + output_tokens * max(sequences - 1, 0)


def settlement(charged_window: int, charged: int, used: int, now: float) -> tuple[int, int]:
    """Where and by how much to correct a charge once the request reports ``used`` tokens: in its own window
    while it lasts; once it is over, only more use lands in the current window (what was over-estimated in a
    past window can no longer be given back)."""
    window, _ = window_of(now)
    delta = used - charged
    return (charged_window, delta) if window == charged_window else (window, max(delta, 0))


def decide(limits: Limits, usage: Usage, cost_tokens: int, now: float) -> Admission:
    """Admits a request costing ``cost_tokens`` given ``usage``, or says which limit it hits."""
    if limits.max_concurrent is not None and usage.concurrent + 1 > limits.max_concurrent:
        return rejection("max_concurrent", now)
    if limits.requests_per_minute is not None and usage.requests + 1 > limits.requests_per_minute:
        return rejection("requests_per_minute", now)
    if limits.tokens_per_minute is not None and usage.tokens + cost_tokens > limits.tokens_per_minute:
        return rejection("tokens_per_minute", now)
    return Admission(True)


class QuotaStore(Protocol):
    async def admit(self, tenant: str, limits: Limits, cost_tokens: int) -> Admission: ...

    async def release(self, admission: Admission, used_tokens: int | None = None) -> None:
        """Gives back the concurrency slot and, with ``used_tokens``, settles the token charge."""

    async def close(self) -> None: ...


class MemoryQuota:
    """Counters in this process: exact for one gateway replica (no await between reading and writing them)."""

    def __init__(self) -> None:
        self._window: dict[str, tuple[int, int, int]] = {}  # tenant -> (window, requests, tokens)
        self._concurrent: dict[str, int] = {}
        self._ids = itertools.count()

    async def admit(self, tenant: str, limits: Limits, cost_tokens: int) -> Admission:
        now = time.time()
        window, _ = window_of(now)
        seen_window, requests, tokens = self._window.get(tenant, (window, 0, 0))
        if seen_window != window:
            requests, tokens = 0, 0
        usage = Usage(requests, tokens, self._concurrent.get(tenant, 0))
        verdict = decide(limits, usage, cost_tokens, now)
        if not verdict.allowed:
            return verdict
        self._window[tenant] = (window, requests + 1, tokens + cost_tokens)
        self._concurrent[tenant] = usage.concurrent + 1
        return Admission(True, lease_id=str(next(self._ids)), tenant=tenant, window=window, tokens=cost_tokens)

    async def release(self, admission: Admission, used_tokens: int | None = None) -> None:
        if not admission.allowed:
            return
        tenant = admission.tenant
        self._concurrent[tenant] = max(0, self._concurrent.get(tenant, 1) - 1)
        if used_tokens is None:
            return
        window, delta = settlement(admission.window, admission.tokens, used_tokens, time.time())
        seen_window, requests, tokens = self._window.get(tenant, (window, 0, 0))
        if seen_window != window:
            requests, tokens = 0, 0
        self._window[tenant] = (window, requests, max(0, tokens + delta))

    async def close(self) -> None:
        return None
