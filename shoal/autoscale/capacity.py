"""How many requests per second one ready replica serves, learned online from the fleet's own behaviour.

A latency signal lags: by the time TTFT P95 breaches, the queue has been growing for a while. Knowing what one
replica can serve turns the arrival rate, which moves first, into a replica count directly. Two observations
feed the estimate, both from signals every source already reports:

- **Saturation** (on average at least one request waiting per ready replica, so every batch is full): the fleet
  then serves exactly its capacity, and what it serves is what arrived minus what piled up. Over a stretch of at
  least ``measure_seconds`` the estimate is ``(mean arrival rate - queue growth per second) / mean ready
  replicas``, blended into a moving average. This is the only observation that can *set* the estimate.
- **Within the SLO** (no queue to speak of, TTFT P95 within target) for a whole stretch of ``measure_seconds``:
  each ready replica then served the stretch's mean ``arrival / ready`` without trouble, a lower bound; it raises
  an estimate that a lighter request mix made too low, and a saturated measurement below it lowers it again. A
  single observation is not enough: the first second of a step looks fine before its queue has built.

Until the fleet has saturated once the estimate is unknown and the policy relies on its reactive rules alone.
"""

from __future__ import annotations

from collections import deque


class CapacityEstimate:
    """Requests/s one ready replica serves at saturation (``per_replica``, None until measured)."""

    __slots__ = ("measure_seconds", "smoothing", "_measured", "_floor", "_stretch", "_comfortable", "_recent")

    def __init__(self, measure_seconds: float = 10.0, smoothing: float = 0.3) -> None:
        self.measure_seconds = measure_seconds
        self.smoothing = smoothing
        self._measured: float | None = None
        self._floor = 0.0
        # stretches being measured, each [start time, start queue, sum of arrival rates, sum of ready, samples]:
        # saturated, and within the SLO
        self._stretch: list[float] | None = None
        self._comfortable: list[float] | None = None
        self._recent: deque[tuple[float, float, int]] = deque()  # (time, waiting, ready) over the last seconds

    @property
    def per_replica(self) -> float | None:
        if self._measured is None:
            return None
        return max(self._measured, self._floor)

    def observe(self, time: float, ready: int, waiting: float, arrival: float, within_slo: bool) -> None:
        """Feeds one complete observation (every ready replica reported its queue, the arrival rate is known)."""
        self._remember_queue(time, waiting, ready)
        if ready and waiting >= ready:
            self._comfortable = None
            self._observe_saturated(time, ready, waiting, arrival)
            return
        self._stretch = None
        if within_slo and ready:
            self._observe_comfortable(time, ready, arrival)
        else:
            self._comfortable = None

    def demand(self, ready: int, waiting: float, arrival: float) -> float:
        """Requests/s arriving: the reported rate, or what the fleet serves plus the queue's growth when that is
        higher (a windowed arrival rate lags a step; the queue shows it within seconds). Meant for a queue
        breach with every replica serving: under a passing wait the growth is noise."""
        capacity = self.per_replica
        if capacity is None or not ready or waiting < ready or len(self._recent) < 2:
            return arrival
        (first_time, first_waiting, first_ready), (last_time, last_waiting, last_ready) = self._recent[0], self._recent[-1]
        if last_time - first_time <= 0 or first_ready != ready or last_ready != ready:
            return arrival
        growth = (last_waiting - first_waiting) / (last_time - first_time)
        return max(arrival, ready * capacity + growth)

    def _remember_queue(self, time: float, waiting: float, ready: int) -> None:
        recent = self._recent
        recent.append((time, waiting, ready))
        while len(recent) > 2 and recent[1][0] <= time - self.measure_seconds / 2:
            recent.popleft()

    def _observe_comfortable(self, time: float, ready: int, arrival: float) -> None:
        stretch = self._comfortable
        if stretch is None:
            self._comfortable = [time, 0.0, arrival, ready, 1.0]
            return
        stretch[2] += arrival
        stretch[3] += ready
        stretch[4] += 1
        if time - stretch[0] >= self.measure_seconds:
            self._floor = max(self._floor, stretch[2] / stretch[3])
            self._comfortable = [time, 0.0, arrival, ready, 1.0]

    def _observe_saturated(self, time: float, ready: int, waiting: float, arrival: float) -> None:
        stretch = self._stretch
        if stretch is None or stretch[3] != ready * stretch[4]:  # a replica came or went: measure afresh
            self._stretch = [time, waiting, 0.0, 0.0, 0.0]
            return
        stretch[2] += arrival
        stretch[3] += ready
        stretch[4] += 1
        elapsed = time - stretch[0]
        if elapsed < self.measure_seconds:
            return
        served = stretch[2] / stretch[4] - (waiting - stretch[1]) / elapsed
        per_replica = served / (stretch[3] / stretch[4])
        self._stretch = [time, waiting, 0.0, 0.0, 0.0]
        if per_replica <= 0:
            return
        previous = self._measured
        self._measured = per_replica if previous is None else previous + self.smoothing * (per_replica - previous)
        self._floor = min(self._floor, per_replica)
