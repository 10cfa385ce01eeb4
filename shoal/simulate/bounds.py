"""What any autoscaler could reach on a trace, as rows beside the policies (``shoal simulate --bounds``).

- ``fixed``: the fleet sized for the trace's peak throughout (what a team runs without an autoscaler).
- ``reactive-oracle``: at every 10 s tick it sizes the fleet for the busiest minute so far, the one just starting
  included, read from the trace, at one replica's SLO capacity from the same load test the baselines are given
  (:mod:`shoal.simulate.sizing`), and never scales down. It learns of a step the instant it begins, without
  measurement lag or noise, and forgets no burst: what it cannot serve, no policy that must first observe a step
  serves (its replicas still take the profile's start-up). Its hours are no yardstick.
- ``clairvoyant``: sizes for the busiest 10 s of the next ``start-up max + 60 s``, so replicas are ready before
  the load comes, and scales down as soon as that falls: what foresight buys.

The oracles read the trace's future, so they live here, beside the simulator, not in :mod:`shoal.autoscale`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shoal.autoscale import FleetSignals, ScalingDecision
from shoal.simulate.profile import EngineProfile
from shoal.simulate.sizing import ReplicaCapacity, replicas_for
from shoal.simulate.trace import Trace

BIN_S = 10.0
MINUTE_S = 60.0
ORACLE_NAMES = ("reactive-oracle", "clairvoyant")


@dataclass
class Oracle:
    """Sizes the fleet for the busiest bin of ``bin_s`` seconds in ``[now, now + lookahead_s)`` of the trace, or,
    with ``memory``, in everything up to the bin that holds ``now``."""

    name: str
    per_bin: np.ndarray  # arrivals per second in each bin of the trace
    bin_s: float
    capacity: ReplicaCapacity
    lookahead_s: float
    max_replicas: int
    memory: bool = False
    period_seconds: float = 10.0

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        now = int(signals.time // self.bin_s)
        first = 0 if self.memory else now
        window = self.per_bin[first : now + max(1, math.ceil(self.lookahead_s / self.bin_s))]
        rate = float(window.max()) if len(window) else 0.0
        target = min(replicas_for(rate, self.capacity), self.max_replicas)
        return ScalingDecision(signals.time, target, "Oracle", f"{self.name}: {rate:.3g} req/s ahead -> {target}")

    def initial_replicas(self) -> int:
        """The count it wants at the trace's start: the fleet it starts warm with."""
        return self.decide(FleetSignals(time=0.0, desired=0)).replicas


def oracles(trace: Trace, profile: EngineProfile, capacity: ReplicaCapacity, max_replicas: int) -> list[Oracle]:
    """The reactive oracle and the clairvoyant for ``trace`` (see the module docstring)."""

    def rates(bin_s: float) -> np.ndarray:
        return np.bincount((trace.arrival // bin_s).astype(np.int64)) / bin_s

    lookahead = profile.startup_s[1] + MINUTE_S
    return [
        Oracle(ORACLE_NAMES[0], rates(MINUTE_S), MINUTE_S, capacity, MINUTE_S, max_replicas, True),
        Oracle(ORACLE_NAMES[1], rates(BIN_S), BIN_S, capacity, lookahead, max_replicas),
    ]
