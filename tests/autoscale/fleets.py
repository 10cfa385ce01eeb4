"""Building FleetSignals for the policy tests, and a small closed-loop fleet to run a policy against.

The closed loop is a fluid model, not the simulator (``shoal simulate`` is the full one): each ready replica
serves ``capacity`` requests/s, arrivals are Poisson, new replicas take ``startup`` seconds to become ready, and
the sources' windows are kept: the arrival rate counts the last 10 s of arrivals, TTFT P95 is over the last
minute of each second's queueing delay. It is
enough to see a policy settle, flap or not, and react to a step, in milliseconds per simulated hour.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from shoal.autoscale import FleetSignals, ReplicaSignals, ScalingDecision, ScalingPolicy


def observe(
    time: float,
    desired: int,
    ready: int | None = None,
    starting: int = 0,
    waiting: float = 0.0,
    running: float = 0.0,
    ttft: float | None = 0.2,
    arrival: float | None = 0.0,
    kv_usage: float | None = None,
    unreported: int = 0,
    max_num_seqs: float | None = None,
    **fleet: object,
) -> FleetSignals:
    """A fleet of ``ready`` ready replicas (default: ``desired - starting``) sharing ``waiting``/``running`` evenly,
    each with batch limit ``max_num_seqs``; ``unreported`` of the ready ones have no queue reading (their scrape
    failed)."""
    ready = desired - starting if ready is None else ready
    reported = max(ready - unreported, 1)
    replicas = [
        ReplicaSignals(
            f"r{i}",
            "ready",
            0.0,
            waiting=None if i < unreported else waiting / reported,
            running=None if i < unreported else running / reported,
            kv_usage=None if i < unreported else kv_usage,
            max_num_seqs=max_num_seqs,
        )
        for i in range(ready)
    ]
    replicas += [ReplicaSignals(f"s{i}", "starting", time) for i in range(starting)]
    return FleetSignals(
        time=time, desired=desired, replicas=tuple(replicas), ttft_p95_seconds=ttft, arrival_rate=arrival, **fleet
    )  # type: ignore[arg-type]


@dataclass
class Replica:
    name: str
    since: float
    ready_at: float


@dataclass
class FluidFleet:
    """Closed loop: Poisson arrivals at ``rate(t)`` (``poisson=False``: exactly ``rate(t)`` each second, for a
    test that needs the rates it asked for), ``capacity`` req/s per ready replica, ``startup`` s to load."""

    capacity: float = 2.0
    startup: float = 60.0
    seed: int = 0
    poisson: bool = True
    replicas: list[Replica] = field(default_factory=list)
    queue: float = 0.0
    desired: int = 1
    decisions: list[ScalingDecision] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self.replicas = [Replica(f"r{i}", -self.startup, 0.0) for i in range(self.desired)]
        self._serial = self.desired
        self._delays: deque[float] = deque(maxlen=60)  # TTFT P95 over a minute, as the sources report it
        self._arrivals: deque[float] = deque(maxlen=10)  # the arrival rate counted over 10 s, as the scrape source does

    def run(self, policy: ScalingPolicy, rate: float | object, seconds: int, start: float = 0.0) -> list[int]:
        """Steps one simulated second at a time; returns the desired count after each decision."""
        counts = []
        for second in range(int(seconds)):
            now = start + second
            lam = rate(now) if callable(rate) else float(rate)  # type: ignore[arg-type]
            decision = policy.decide(self.step(now, lam))
            self.decisions.append(decision)
            self.apply(now, decision.replicas)
            counts.append(self.desired)
        return counts

    def step(self, now: float, lam: float) -> FleetSignals:
        ready = [r for r in self.replicas if r.ready_at <= now]
        arrived = self._poisson(lam)
        self._arrivals.append(arrived)
        self.queue += arrived
        served = min(self.queue, len(ready) * self.capacity)
        self.queue -= served
        share = self.queue / len(ready) if ready else 0.0
        if ready:
            self._delays.append(0.2 + self.queue / (len(ready) * self.capacity))
        ttft = sorted(self._delays)[int(0.95 * (len(self._delays) - 1))] if self._delays else None
        replicas = tuple(
            ReplicaSignals(r.name, "ready", r.ready_at, waiting=share, running=served / len(ready))
            if r.ready_at <= now
            else ReplicaSignals(r.name, "starting", r.since)
            for r in self.replicas
        )
        return FleetSignals(
            time=now,
            desired=self.desired,
            replicas=replicas,
            ttft_p95_seconds=ttft,
            arrival_rate=sum(self._arrivals) / len(self._arrivals),
        )

    def apply(self, now: float, replicas: int) -> None:
        while len(self.replicas) < replicas:
            self.replicas.append(Replica(f"r{self._serial}", now, now + self.startup))
            self._serial += 1
        while len(self.replicas) > replicas:
            loading = [r for r in self.replicas if r.ready_at > now]
            self.replicas.remove(loading[-1] if loading else self.replicas[-1])
        self.desired = replicas

    def _poisson(self, lam: float) -> float:
        if not self.poisson:
            return max(lam, 0.0)
        if lam <= 0:
            return 0
        count, total = 0, self._random.expovariate(lam)
        while total < 1.0:
            count += 1
            total += self._random.expovariate(lam)
        return count


def reversals(counts: list[int]) -> int:
    """How often the count changed direction (up then down, or down then up)."""
    direction, turns, previous = 0, 0, counts[0] if counts else 0
    for count in counts[1:]:
        if count != previous:
            step = 1 if count > previous else -1
            turns += direction not in (0, step)
            direction = step
        previous = count
    return turns
