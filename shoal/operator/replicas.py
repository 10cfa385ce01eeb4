"""Who decides the engine replica count, and how much.

One owner at a time: with ``autoscaling.enabled: false`` the spec does (``replicas.count``, written by users,
``kubectl scale`` or an HPA/KEDA through the scale subresource); with it on, the autoscaler does, through the
:class:`Autoscaler` hook, and ``replicas.count`` is ignored. Either way the result is clamped to
``[replicas.min, replicas.max]`` and the reason is kept for the status history. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from shoal.operator.spec import InferenceDeploymentSpec


@dataclass(frozen=True)
class ScaleDecision:
    """A desired engine count with the reason for it, plus the metrics it was based on (None if unknown)."""

    replicas: int
    reason: str
    queue_depth: float | None = None
    ttft_p95_seconds: float | None = None
    limited: str | None = None  # "TooFewReplicas" / "TooManyReplicas" when clamped


class Autoscaler(Protocol):
    """The autoscaler's hook: ``None`` when it cannot decide (no metrics yet)."""

    def __call__(
        self, name: str, spec: InferenceDeploymentSpec, current: int, now: datetime
    ) -> ScaleDecision | None: ...


def decide_replicas(
    name: str,
    spec: InferenceDeploymentSpec,
    current: int | None,
    now: datetime,
    autoscaler: Autoscaler | None = None,
) -> ScaleDecision:
    """The engine count to apply now. ``current`` is the last desired count (None before the first one)."""
    bounds = spec.replicas
    if not spec.autoscaling.enabled:
        return ScaleDecision(spec.replicas.fixed, f"replicas.count is {spec.replicas.fixed}")
    held = bounds.min if current is None else current
    decision = autoscaler(name, spec, held, now) if autoscaler is not None else None
    if decision is None:
        return _clamp(ScaleDecision(held, "MetricsMissing: holding the replica count until metrics arrive"), spec)
    return _clamp(decision, spec)


def _clamp(decision: ScaleDecision, spec: InferenceDeploymentSpec) -> ScaleDecision:
    low, high = spec.replicas.min, spec.replicas.max
    if decision.replicas < low:
        return ScaleDecision(low, decision.reason, decision.queue_depth, decision.ttft_p95_seconds, "TooFewReplicas")
    if decision.replicas > high:
        return ScaleDecision(high, decision.reason, decision.queue_depth, decision.ttft_p95_seconds, "TooManyReplicas")
    return decision
