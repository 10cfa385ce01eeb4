"""The scaling policy protocol every autoscaler implements (Shoal's own and the baselines the simulator
compares it with): a small object that keeps its own history and turns one :class:`FleetSignals` into one
:class:`ScalingDecision`. No I/O and no clock reads, so production, tests and the simulator run the same code."""

from __future__ import annotations

from typing import Protocol

from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.signals import FleetSignals


class ScalingPolicy(Protocol):
    name: str

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        """The replica count wanted now, given what was observed at ``signals.time``."""
        ...
