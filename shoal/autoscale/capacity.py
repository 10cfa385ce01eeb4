"""How many requests per second one ready replica serves, learned online from the fleet's own behaviour.

A latency signal lags: by the time TTFT P95 breaches, the queue has been growing for a while. Knowing what one
replica can serve turns the arrival rate, which moves first, into a replica count directly. Three observations
feed the estimate, from signals every source reports:

- **Saturation** (a request waiting on every ready replica, so every batch is full): the fleet
  then serves exactly its capacity, and what it serves is what arrived minus what piled up. Over a stretch of at
  least ``measure_seconds`` and 50 arrivals, long enough that arrival noise is under a fifth of what was served,
  with the same ready replicas and a steady reported arrival rate (its two halves' means within 10%: a windowed
  rate still catching up with a step would make the fleet look slower than it is), it is
  ``(mean arrival rate - queue growth per second) / ready replicas``, blended into a moving average; only when the
  queue grew by more than twice the arrival count's Poisson spread: full batches over a queue that held its size
  (a replica admitting at every step always shows a request waiting) say only that the replicas kept up, a lower
  bound like the one below. Taking that for the capacity sized a fleet that one replica served at two (Azure conv).
- **Within the SLO** (no queue to speak of, TTFT P95 within target) for a whole stretch of ``measure_seconds``:
  each ready replica then served the stretch's mean ``arrival / ready`` without trouble, a lower bound (the
  **floor**); it raises an estimate that a lighter request mix made too low, and a saturated measurement below it
  lowers it again. A single observation is not enough: the first second of a step looks fine before its queue
  has built. Each reading enters the floor less two Poisson deviations (:func:`_lower`): the floor is the largest
  of many readings, and at face value noise lifted it past the capacity.
- **Near full** (occupancy, running over the batch limit or KV usage, whichever is higher, at least ``NEAR_FULL``
  on average over a stretch of ``measure_seconds``, no backlog at its start and a queue that did not grow): by
  Little's law occupancy is the arrival rate times the time a request spends in the engine, and that time never
  shrinks as the batch fills (a fuller step is never a faster one), so the capacity is at most
  ``served / occupancy``: what the replicas serve is at least ``NEAR_FULL`` of it. With no estimate yet it is the
  estimate, so a ramp is answered while the batches fill, before the queue does (the diurnal trace's one
  replica runs its batch 70% full at 90% of its capacity, 43% full at 78%, as its steps slow with the batch);
  sizing on it errs one way, towards at most ``1 / NEAR_FULL`` times the replicas. Any estimate is kept within
  ``[served, served / occupancy]``. It assumes the batch or the KV cache is what fills as load rises; a replica
  bound by its prefill compute with few sequences running (long prompts) never looks full, and the other
  observations are all it has.

Until one of these has measured the fleet, the estimate is unknown and the policy relies on its reactive rules
alone, and on a **ceiling**: the per-replica arrival rate at which the fleet last breached a target, which a
consolidation must stay under (a fleet that breached at 1 replica for 1 req/s is not taken back to 1 replica for
1 req/s: Dynamo's 2-to-1 oscillation). A stretch within the SLO at or above the ceiling lifts it. A breach's own
arrival rate is read at a noisy moment, so the policy adds a second, firmer one: when a consolidation is followed
by a breach within a scale-down window, the rate per survivor it was taken at (:meth:`consolidation_failed`),
which no stretch lifts (a lower load still passes under it; without it, constant load flipped the fleet between
N and N+1 every few minutes).
"""

from __future__ import annotations

import math
from collections import deque

# a saturated stretch counts only if the reported arrival rate shows no trend over it: a windowed rate still
# catching up with a step (the first minute of a burst) would make the fleet look slower than it is
_STEADY_ARRIVALS = 0.1
# ... and only once it has seen this many arrivals: over fewer, arrival noise swamps the queue's growth
_MIN_ARRIVALS = 50.0
# the queue must grow by more than this many standard deviations of the arrival count for a saturated stretch to
# measure the capacity; a queue that held its size only shows the replicas kept up
_GROWTH_NOISE = 2.0
# mean occupancy from which what the replicas serve estimates their capacity (at least this share of it); lower
# answers a ramp earlier at the price of more replicas until a saturated measurement comes
NEAR_FULL = 0.7


class _Stretch:
    """Observations since ``start`` with a constant ready count, and the arrival rates and occupancies reported
    over it (occupancy None when any observation lacked it)."""

    __slots__ = ("arrivals", "occupancy", "ready", "start", "waiting")

    def __init__(
        self, start: float, waiting: float, ready: int, arrival: float, occupancy: float | None = None
    ) -> None:
        self.start, self.waiting, self.ready = start, waiting, ready
        self.arrivals = [arrival]
        self.occupancy: list[float] | None = None if occupancy is None else [occupancy]

    def add(self, arrival: float, occupancy: float | None = None) -> None:
        self.arrivals.append(arrival)
        if self.occupancy is not None:
            if occupancy is None:
                self.occupancy = None
            else:
                self.occupancy.append(occupancy)

    @property
    def mean_arrival(self) -> float:
        return sum(self.arrivals) / len(self.arrivals)

    @property
    def mean_occupancy(self) -> float | None:
        return None if self.occupancy is None else sum(self.occupancy) / len(self.occupancy)

    @property
    def steady(self) -> bool:
        """No trend: the second half's mean arrival rate within the share of the first's (noise averages out,
        a ramp does not)."""
        half = len(self.arrivals) // 2
        if half == 0:
            return False
        first = sum(self.arrivals[:half]) / half
        second = sum(self.arrivals[half:]) / (len(self.arrivals) - half)
        return abs(second - first) <= _STEADY_ARRIVALS * max(first, second)


class CapacityEstimate:
    """Requests/s one ready replica serves at saturation (``per_replica``, None until measured or seen near
    full)."""

    __slots__ = (
        "_basis",
        "_ceiling",
        "_comfortable",
        "_floor",
        "_measured",
        "_occupied",
        "_recent",
        "_regret",
        "_stretch",
        "measure_seconds",
        "smoothing",
    )

    def __init__(self, measure_seconds: float = 10.0, smoothing: float = 0.3) -> None:
        self.measure_seconds = measure_seconds
        self.smoothing = smoothing
        self._measured: float | None = None
        self._basis = "unknown"
        self._floor = 0.0
        self._ceiling = math.inf
        self._regret = math.inf
        self._stretch: _Stretch | None = None  # saturated
        self._comfortable: _Stretch | None = None  # within the SLO
        self._occupied: _Stretch | None = None  # not saturated, occupancy reported
        self._recent: deque[tuple[float, float, int]] = deque()  # (time, waiting, ready) over the last seconds

    @property
    def per_replica(self) -> float | None:
        if self._measured is None:
            return None
        return max(self._measured, self._floor)

    @property
    def basis(self) -> str:
        """What the latest measurement of ``per_replica`` saw, for the decisions' messages."""
        return self._basis

    @property
    def floor(self) -> float | None:
        """Requests/s per ready replica the fleet has been seen to serve without its queue growing (None if never):
        at most the capacity, so a fleet sized on it is never too small, only maybe too large."""
        return self._floor or None

    @property
    def ceiling(self) -> float:
        """Requests/s per ready replica at which the fleet breached its targets (inf if never): what
        consolidation must stay under while the capacity itself is unknown."""
        return min(self._ceiling, self._regret)

    def breached(self, ready: int, arrival: float) -> None:
        """The fleet breached a target with ``ready`` replicas serving ``arrival`` requests/s. Not while the queue
        shrinks: that is a backlog draining (a TTFT window lags it by a minute, typically just after the replicas
        asked for it joined), which says nothing of what these replicas carry; taken for a ceiling it held a
        fleet at 11 replicas where 3 serve the load."""
        recent = self._recent
        if len(recent) >= 2 and recent[-1][1] < recent[0][1]:
            return
        if ready and arrival > 0:
            self._ceiling = min(self._ceiling, arrival / ready)

    def consolidation_failed(self, survivors: int, arrival: float) -> None:
        """``survivors`` replicas left with ``arrival`` requests/s by a consolidation breached soon after."""
        if survivors and arrival > 0:
            self._regret = min(self._regret, arrival / survivors)

    def observe(
        self,
        time: float,
        ready: int,
        waiting: float,
        arrival: float,
        within_slo: bool,
        saturated: bool,
        occupancy: float | None = None,
    ) -> None:
        """Feeds one complete observation (every ready replica reported its queue, the arrival rate is known);
        ``saturated``: every ready replica has a request waiting; ``occupancy``: how full their batches are
        (None when the engines do not say)."""
        self._remember_queue(time, waiting, ready)
        if ready:  # a request waiting now and then is part of running near full: this stretch spans both
            self._observe_occupied(time, ready, waiting, arrival, occupancy)
        if saturated:
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
        (first_time, first_waiting, first_ready), (last_time, last_waiting, last_ready) = (
            self._recent[0],
            self._recent[-1],
        )
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
        if stretch is None or stretch.ready != ready:
            self._comfortable = _Stretch(time, 0.0, ready, arrival)
            return
        stretch.add(arrival)
        if time - stretch.start >= self.measure_seconds:
            self._floor = max(self._floor, _lower(stretch.mean_arrival, time - stretch.start) / ready)
            if self._floor >= self._ceiling:  # the breach was noise: this load was served well for a whole stretch
                self._ceiling = math.inf
            self._comfortable = _Stretch(time, 0.0, ready, arrival)

    def _observe_occupied(
        self, time: float, ready: int, waiting: float, arrival: float, occupancy: float | None
    ) -> None:
        stretch = self._occupied
        if stretch is None or stretch.ready != ready or stretch.occupancy is None:
            self._occupied = _Stretch(time, waiting, ready, arrival, occupancy)
            return
        stretch.add(arrival, occupancy)
        elapsed = time - stretch.start
        mean = stretch.mean_occupancy
        if elapsed < self.measure_seconds or mean is None:
            return
        self._occupied = _Stretch(time, waiting, ready, arrival, occupancy)
        arrived = stretch.mean_arrival * elapsed
        growth = waiting - stretch.waiting
        if mean < NEAR_FULL or arrived < _MIN_ARRIVALS or not stretch.steady:
            return  # not near full, too few arrivals to tell, or a ramp the windowed rate still catches up with
        if stretch.waiting > ready or growth > _GROWTH_NOISE * math.sqrt(arrived):
            return  # a backlog keeps batches full whatever arrives; a queue building is the saturated rule's case
        served = (stretch.mean_arrival - growth / elapsed) / ready
        most = served / mean  # Little's law: the capacity is at most this
        self._floor = min(self._floor, most)
        previous = self._measured
        estimate = served if previous is None else min(max(previous, served), most)
        if estimate != previous:
            self._measured, self._basis = estimate, f"served at {mean:.0%} occupancy"

    def _observe_saturated(self, time: float, ready: int, waiting: float, arrival: float) -> None:
        stretch = self._stretch
        if stretch is None or stretch.ready != ready:  # a replica came or went: measure afresh
            self._stretch = _Stretch(time, waiting, ready, arrival)
            return
        stretch.add(arrival)
        elapsed = time - stretch.start
        if elapsed < self.measure_seconds or stretch.mean_arrival * elapsed < _MIN_ARRIVALS:
            return
        growth = waiting - stretch.waiting
        served = stretch.mean_arrival - growth / elapsed
        noise = math.sqrt(stretch.mean_arrival * elapsed)  # Poisson spread of the stretch's arrival count
        # far over capacity, what is served is a small difference of two large, noisy rates: keep measuring
        # until Poisson noise on the arrivals is under a fifth of it
        if served <= 0 or noise / elapsed > 0.2 * served:
            return
        self._stretch = _Stretch(time, waiting, ready, arrival)
        if growth < _GROWTH_NOISE * noise:
            # full batches but a queue that did not grow: the replicas kept up with what arrived, so this is what
            # they serve at least, not what they can serve (a replica admitting at every step always shows a wait)
            self._floor = max(self._floor, _lower(stretch.mean_arrival, elapsed) / ready)
            return
        if not stretch.steady:
            return
        per_replica = served / ready
        previous = self._measured
        self._measured = per_replica if previous is None else previous + self.smoothing * (per_replica - previous)
        self._floor = min(self._floor, per_replica)
        self._basis = "measured at saturation"


def _lower(rate: float, seconds: float) -> float:
    """A Poisson rate's lower confidence bound from ``seconds`` of it: the floor is the largest of many such
    readings, so a reading at face value would let arrival noise lift it past the capacity."""
    return max(0.0, rate - _GROWTH_NOISE * math.sqrt(rate * seconds) / seconds)
