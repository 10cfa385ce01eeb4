"""The scheduler's waiting queue: requests in (priority, arrival) order, a preempted one back in its place.

Modelled on vLLM v1's ``request_queue.py``, reduced to the one policy the engine has: a lower ``priority``
goes first, and among equals the earlier arrival (with every priority equal this is first come, first
served). A request's arrival rank is given once, when it enters the engine, and kept until it finishes, so a
request preempted by recompute goes back ahead of every later arrival, and the scheduler can pick as
preemption victim the running request that ranks last. A binary heap keeps ``add``, ``prepend`` and ``pop``
at O(log n); ``remove`` (an abort while waiting) is O(n), which is rare next to the per-step pops.
"""

from __future__ import annotations

import heapq
import itertools

from shoal.engine.core.request import Request

Rank = tuple[int, int]  # (priority, arrival number): lower runs first


class RequestQueue:
    """Waiting requests, ordered by rank; remembers the rank of every request in the engine until it leaves."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Request]] = []
        self._arrivals: dict[str, int] = {}  # every request in the engine, waiting or running
        self._queued: set[str] = set()  # the waiting ones
        self._counter = itertools.count()

    def add(self, request: Request) -> None:
        """A new arrival: it ranks after everything already in the engine at its priority."""
        if request.request_id in self._arrivals:
            raise ValueError(f"request_id {request.request_id!r} is already in the engine")
        self._arrivals[request.request_id] = next(self._counter)
        self._push(request)

    def prepend(self, request: Request) -> None:
        """A preempted request: back with its original rank, ahead of every later arrival."""
        self._push(request)

    def peek(self) -> Request:
        """The request that runs next (the queue must not be empty)."""
        return self._heap[0][2]

    def pop(self) -> Request:
        """Takes the next request out; its rank stays known while it runs."""
        request = heapq.heappop(self._heap)[2]
        self._queued.discard(request.request_id)
        return request

    def remove(self, request: Request) -> None:
        """The request leaves the engine (finished or aborted): out of the queue if waiting, its rank forgotten."""
        if request.request_id in self._queued:
            priority, arrival = self.rank(request)
            self._heap.remove((priority, arrival, request))
            heapq.heapify(self._heap)
            self._queued.discard(request.request_id)
        del self._arrivals[request.request_id]

    def rank(self, request: Request) -> Rank:
        """Where the request stands: the one with the highest rank is the first to be preempted."""
        return (request.priority, self._arrivals[request.request_id])

    def __len__(self) -> int:
        return len(self._heap)

    def _push(self, request: Request) -> None:
        priority, arrival = self.rank(request)
        heapq.heappush(self._heap, (priority, arrival, request))
        self._queued.add(request.request_id)
