"""One pass over a :class:`FleetSignals` snapshot: the totals the control law reasons with.

Replicas that report no queue (their scrape failed) are counted apart, so the policy can scale up on what the
others show but never scale down on a partial view; so are replicas still starting after the start-up timeout
(``stuck``): a pod that never loads must not count as capacity on its way forever.

**Occupancy** is how full the ready replicas are, each as the larger of its batch (running over its
``max_num_seqs``) and its KV cache: the engine admits nothing more once either is full, so a replica near 1 is
near saturation even while nothing waits. It is the mean over the replicas that report a batch limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.autoscale.signals import FleetSignals


@dataclass(frozen=True, slots=True)
class FleetLoad:
    """``waiting``/``running``/``kv_usage`` are over the ready replicas that reported them (``known`` of ``ready``);
    ``kv_usage`` is their mean, None when none reported it; ``queued_replicas`` have at least one request waiting;
    ``starting`` are loading within the start-up timeout, ``stuck`` past it; ``occupancy`` (0..1, see the module
    docstring) is None when no ready replica reported its batch limit."""

    ready: int
    starting: int
    known: int
    waiting: float
    running: float
    kv_usage: float | None
    queued_replicas: int = 0
    stuck: int = 0
    occupancy: float | None = None

    @property
    def partial(self) -> bool:
        return self.known < self.ready

    @property
    def queue_per_ready(self) -> float:
        """Waiting requests per ready replica, over those that reported (0 with none)."""
        return self.waiting / self.known if self.known else 0.0

    @property
    def saturated(self) -> bool:
        """Every ready replica reported a request waiting: all batches are full, the fleet serves its capacity."""
        return self.ready > 0 and self.queued_replicas == self.ready

    @property
    def busy(self) -> bool:
        return self.waiting > 0 or self.running > 0


def fleet_load(signals: FleetSignals, startup_timeout_seconds: float = float("inf")) -> FleetLoad:
    ready = starting = stuck = known = kv_known = queued = limited = 0
    waiting = running = kv_total = occupied = 0.0
    for replica in signals.replicas:
        if replica.phase == "starting":
            if signals.time - replica.since > startup_timeout_seconds:
                stuck += 1
            else:
                starting += 1
            continue
        if replica.phase != "ready":
            continue
        ready += 1
        if replica.waiting is not None:
            known += 1
            waiting += replica.waiting
            running += replica.running or 0.0
            queued += replica.waiting >= 1
            if replica.max_num_seqs:
                limited += 1
                occupied += min(1.0, max((replica.running or 0.0) / replica.max_num_seqs, replica.kv_usage or 0.0))
        if replica.kv_usage is not None:
            kv_known += 1
            kv_total += replica.kv_usage
    kv_usage = kv_total / kv_known if kv_known else None
    occupancy = occupied / limited if limited else None
    return FleetLoad(ready, starting, known, waiting, running, kv_usage, queued, stuck, occupancy)
