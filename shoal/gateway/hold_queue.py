"""Scale from zero: requests held while a model has no ready replica, released in arrival order once one is.

When the proxy finds no replica for a model it asks :class:`HoldQueue` to wait instead of answering 503 at
once. Each held request is a future in its model's FIFO; the gateway calls :meth:`HoldQueue.release` whenever
a health check brings a replica into rotation, which resolves the futures in the order they were queued, so
the requests resume (and are routed) in arrival order. The number held per model is the gauge
``shoal_gateway_requests_held``: the demand the autoscaler reads to scale a fleet up from zero engines.

Limits: at most ``size`` requests wait per gateway (``size`` 0 turns holding off) and none longer than
``wait_s``; past either the request gets a 503 with ``Retry-After``. A client that disconnects while held is
cancelled by the proxy's disconnect watcher: its future leaves the queue and the gauge at once, and nothing was
sent upstream, so it costs no engine anything.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from prometheus_client import Gauge

from shoal.protocol.errors import service_unavailable


class HoldQueue:
    def __init__(self, size: int, wait_s: float, retry_after_s: int, gauge: Gauge) -> None:
        self.size, self.wait_s, self.retry_after_s = size, wait_s, retry_after_s
        self._gauge = gauge
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    @property
    def held(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    async def wait(self, model: str, ready: Callable[[], bool]) -> None:
        """Returns once ``ready()`` (a replica for ``model`` is in rotation); raises a 503 past the limits."""
        if ready():
            return
        if self.size == 0:
            raise service_unavailable(f"No healthy backend is available for model `{model}`.", self.retry_after_s)
        if self.held >= self.size:
            raise service_unavailable(
                f"No replica of model `{model}` is ready and {self.size} requests are already held for one.",
                self.retry_after_s,
            )
        queue = self._waiting.setdefault(model, deque())
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(future)
        self._gauge.labels(model).inc()
        try:
            await asyncio.wait_for(future, self.wait_s)
        except TimeoutError:
            raise service_unavailable(
                f"No replica of model `{model}` became ready within {self.wait_s:g}s.", self.retry_after_s
            ) from None
        finally:
            self._gauge.labels(model).dec()
            if future in queue:
                queue.remove(future)
            if not queue and self._waiting.get(model) is queue:
                del self._waiting[model]

    def release(self, ready: Callable[[str], bool]) -> None:
        """Wakes, oldest first, every request held for a model that ``ready(model)`` says is servable now."""
        for model, queue in list(self._waiting.items()):
            if ready(model):
                while queue:
                    future = queue.popleft()
                    if not future.done():
                        future.set_result(None)
