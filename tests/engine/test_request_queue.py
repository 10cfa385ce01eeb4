"""The waiting queue pops in (priority, arrival) order under any mix of arrivals, preemptions and aborts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.engine.core.request import Request
from shoal.engine.core.request_queue import RequestQueue
from shoal.engine.core.sampling_params import SamplingParams


def _request(i: int, priority: int) -> Request:
    return Request(f"r{i}", [1, 2], SamplingParams(), arrival_time=0.0, priority=priority)


_operations = st.lists(st.tuples(st.sampled_from(["add", "pop", "preempt", "abort"]), st.integers(0, 3)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(operations=_operations)
def test_pops_follow_priority_then_arrival_and_a_preempted_request_keeps_its_place(
    operations: list[tuple[str, int]],
) -> None:
    queue = RequestQueue()
    waiting: list[tuple[int, int, Request]] = []  # the model: (priority, arrival number, request)
    running: list[tuple[int, int, Request]] = []
    arrivals = 0
    for operation, value in operations:
        if operation == "add":
            request = _request(arrivals, priority=value)
            queue.add(request)
            waiting.append((value, arrivals, request))
            arrivals += 1
        elif operation == "pop" and waiting:
            expected = min(waiting, key=lambda entry: entry[:2])
            assert queue.peek() is expected[2]
            assert queue.pop() is expected[2]
            waiting.remove(expected)
            running.append(expected)
        elif operation == "preempt" and running:
            entry = running.pop(value % len(running))
            queue.prepend(entry[2])
            waiting.append(entry)
        elif operation == "abort" and (waiting or running):
            pool = waiting if (value % 2 == 0 and waiting) or not running else running
            entry = pool.pop(value % len(pool))
            queue.remove(entry[2])
        assert len(queue) == len(waiting)
        for priority, arrival, request in waiting + running:
            assert queue.rank(request) == (priority, arrival)


def test_a_request_id_already_in_the_engine_is_refused() -> None:
    queue = RequestQueue()
    queue.add(_request(1, 0))
    with pytest.raises(ValueError, match="'r1' is already in the engine"):
        queue.add(_request(1, 0))
    queue.remove(queue.pop())
    queue.add(_request(1, 0))  # once it has left, the id may come back
    assert len(queue) == 1
