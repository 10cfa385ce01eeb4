"""Who decides the engine replica count, and how much.

One owner at a time: with ``autoscaling.enabled: false`` (or ``mode: Recommend``) the spec does
(``replicas.count``, written by users, ``kubectl scale`` or an HPA/KEDA through the scale subresource); with it
on, the autoscaler does (:mod:`.autoscaler`), and ``replicas.count`` is ignored. Either way the result is
clamped to ``[replicas.min, replicas.max]``, and never to zero without a gateway (nothing would hold the requests
that bring the fleet back); the reason is kept for the status history. No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from shoal.operator.spec import InferenceDeploymentSpec


@dataclass(frozen=True)
class ScaleDecision:
    """A desired engine count with the reason for it, plus the metrics it was based on (None if unknown).

    From the autoscaler also the rule that fired, the values it saw, and why metrics were missing (if they were).
    """

    replicas: int
    reason: str
    queue_depth: float | None = None
    ttft_p95_seconds: float | None = None
    limited: str | None = None  # "TooFewReplicas" / "TooManyReplicas" / "NoGateway" when clamped
    rule: str | None = None
    values: Mapping[str, float] = field(default_factory=dict)
    missing: str | None = None
    tpot_p90_seconds: float | None = None


def decide_replicas(
    spec: InferenceDeploymentSpec, current: int | None, proposal: ScaleDecision | None
) -> ScaleDecision:
    """The engine count to apply now. ``current`` is the last desired count (None before the first one);
    ``proposal`` is the autoscaler's wish (None when it has none: no autoscaler runs)."""
    if not spec.autoscaling.enabled or spec.autoscaling.mode == "Recommend":
        return ScaleDecision(spec.replicas.fixed, f"replicas.count is {spec.replicas.fixed}")
    held = spec.replicas.min if current is None else current
    if proposal is None:
        return _clamp(ScaleDecision(held, "MetricsMissing: holding the replica count until metrics arrive"), spec)
    return _clamp(proposal, spec)


def _clamp(decision: ScaleDecision, spec: InferenceDeploymentSpec) -> ScaleDecision:
    low, high = spec.replicas.min, spec.replicas.max
    if decision.replicas < low:
        return replace(decision, replicas=low, limited="TooFewReplicas")
    if decision.replicas > high:
        return replace(decision, replicas=high, limited="TooManyReplicas")
    if decision.replicas == 0 and spec.gateway.replicas == 0:
        return replace(decision, replicas=1, limited="NoGateway")
    return decision
