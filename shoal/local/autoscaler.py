"""The autoscaler of a local fleet: the same policy object the operator runs, fed the direct-scrape signals,
resizing :class:`EngineFleet` instead of a Deployment. This is only the edge: every rule is in the policy.
With ``act`` false (``autoscaling.mode: Recommend``) decisions are recorded and shown, and the count stays."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.policy import ScalingPolicy
from shoal.autoscale.signals import FleetSignals
from shoal.local.fleet import EngineFleet
from shoal.local.snapshot import DecisionRow, decision_row

DECISIONS_KEPT = 20


@dataclass
class LocalAutoscaler:
    policy: ScalingPolicy
    act: bool = True
    interval_s: float = 2.0
    decisions: deque[DecisionRow] = field(default_factory=lambda: deque(maxlen=DECISIONS_KEPT))
    last: DecisionRow | None = None  # the latest evaluation, whether or not it changed the count
    _at: float = float("-inf")

    def step(self, signals: FleetSignals, fleet: EngineFleet) -> ScalingDecision | None:
        """Asks the policy at most once per ``interval_s``; records a decision that changes the count, and applies
        it when acting."""
        if signals.time - self._at < self.interval_s:
            return None
        self._at = signals.time
        decision = self.policy.decide(signals)
        self.last = decision_row(decision, fleet.desired)
        if not decision.changes(fleet.desired):
            return None
        if self.decisions and not self.act and self.decisions[-1].to_replicas == decision.replicas:
            return None  # the same recommendation again: recorded once
        self.decisions.append(decision_row(decision, fleet.desired))
        if self.act:
            fleet.scale_to(decision.replicas)
        return decision
