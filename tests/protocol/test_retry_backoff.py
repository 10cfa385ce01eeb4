"""The retry helper's promises, on a fake clock: delays within the cap, a schedule that never shrinks, no
attempt and no wait past the budget, and a success that starts the schedule over."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.protocol.backoff import Backoff, Retry

_backoffs = st.builds(
    lambda initial, spread, factor, jitter: Backoff(initial, initial * spread, factor, jitter),
    initial=st.floats(0.0, 5.0),
    spread=st.floats(1.0, 100.0),
    factor=st.floats(1.0, 10.0),
    jitter=st.floats(0.0, 1.0),
)


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@settings(max_examples=300, deadline=None)
@given(backoff=_backoffs, failures=st.integers(1, 5000), draw=st.floats(0.0, 1.0, exclude_max=True))
def test_every_delay_is_within_the_cap_and_at_most_the_schedule(backoff: Backoff, failures: int, draw: float) -> None:
    delay = backoff.delay(failures, draw)
    assert 0.0 <= delay <= backoff.base(failures) <= backoff.cap_s
    assert delay >= backoff.base(failures) * (1 - backoff.jitter) - 1e-12


@settings(max_examples=300, deadline=None)
@given(backoff=_backoffs, failures=st.integers(1, 5000))
def test_the_schedule_never_shrinks_and_starts_at_the_initial_delay(backoff: Backoff, failures: int) -> None:
    assert backoff.base(1) == backoff.initial_s
    assert backoff.base(failures) <= backoff.base(failures + 1)


@settings(max_examples=200, deadline=None)
@given(
    backoff=_backoffs,
    max_attempts=st.one_of(st.none(), st.integers(1, 30)),
    budget=st.floats(0.0, 60.0),
    attempt_cost=st.floats(0.0, 3.0),
    draws=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=8),
)
def test_attempts_and_waits_stay_within_the_budget(
    backoff: Backoff, max_attempts: int | None, budget: float, attempt_cost: float, draws: list[float]
) -> None:
    time = FakeTime()
    pending = itertools.cycle(draws)
    retry = Retry(
        backoff,
        max_attempts=max_attempts,
        deadline=budget,
        clock=time.clock,
        sleep=time.sleep,
        draw=lambda: next(pending),
    )
    started_at: list[float] = []

    async def run() -> None:
        while retry.allows_another() and len(started_at) < 500:
            retry.begin()
            started_at.append(time.now)
            time.now += attempt_cost  # the attempt itself takes time, then fails
            await retry.failed()

    asyncio.run(run())
    assert all(start < budget for start in started_at)  # nothing starts at or after the deadline
    assert max_attempts is None or retry.attempts <= max_attempts
    assert sum(time.slept) <= budget + 1e-9
    assert time.now <= budget + attempt_cost + 1e-9  # no wait runs past the deadline
    assert all(0 < seconds <= backoff.cap_s for seconds in time.slept)


def test_a_success_starts_the_schedule_over() -> None:
    time = FakeTime()
    retry = Retry(Backoff(0.5, 10.0), clock=time.clock, sleep=time.sleep, draw=lambda: 0.0)

    async def fail(times: int) -> None:
        for _ in range(times):
            await retry.failed()

    asyncio.run(fail(6))
    assert time.slept == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    retry.succeeded()
    asyncio.run(fail(2))
    assert time.slept[-2:] == [0.5, 1.0]


def test_without_a_backoff_a_failure_does_not_wait() -> None:
    time = FakeTime()
    retry = Retry(max_attempts=3, clock=time.clock, sleep=time.sleep)
    count = 0

    async def run() -> None:
        nonlocal count
        while retry.allows_another():
            retry.begin()
            count += 1
            await retry.failed()

    asyncio.run(run())
    assert count == retry.attempts == 3 and time.slept == []


def test_an_impossible_schedule_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="initial_s <= cap_s"):
        Backoff(5.0, 1.0)
    with pytest.raises(ValueError, match="jitter in"):
        Backoff(1.0, 2.0, jitter=1.5)
