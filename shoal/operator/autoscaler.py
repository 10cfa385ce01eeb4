"""The autoscaler inside the operator: one policy per InferenceDeployment, fed by a metrics source.

The reconciler calls :meth:`FleetAutoscaler.evaluate` on every pass over an InferenceDeployment with autoscaling
on: the status timer (every ``--resync-seconds``) and the immediate pass an Alertmanager alert triggers. It
observes the fleet through the source its spec names (I/O at the edge, bounded by ``timeout_s``: a hung
Prometheus or engine becomes missing data, never a stuck operator), hands the :class:`FleetSignals` to that
fleet's own pure policy (:class:`~shoal.autoscale.ShoalPolicy` unless told otherwise), and returns the policy's
decision as the operator's :class:`~shoal.operator.replicas.ScaleDecision`. The policy keeps its own history, so
it lives as long as the operator process and is rebuilt only when the spec's targets change (a history about
other targets would mislead it); a restarted operator starts with an empty history, and the policy refuses to
scale down before it has a full window of it.

Alerts: :meth:`alert` records which of a fleet's alerts fire (by Alertmanager fingerprint). While any does, the
signals say so (``alert_firing``: the policy scales up at once, skipping its up-stabilization) and a lower count
is never applied here either, whatever the policy says; a resolved alert only ends that, it never triggers a
pass of its own, so it cannot scale down by itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from shoal.autoscale import AutoscalingConfig, FleetSignals, ScalingPolicy, ShoalPolicy
from shoal.autoscale.source import ReplicaTarget
from shoal.operator.replicas import ScaleDecision
from shoal.operator.spec import InferenceDeploymentSpec

log = logging.getLogger(__name__)

FleetKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class FleetRef:
    """The InferenceDeployment an observer observes, and its engine pods as the operator's watch sees them."""

    namespace: str
    name: str
    spec: InferenceDeploymentSpec
    replicas: tuple[ReplicaTarget, ...] = ()

    @property
    def key(self) -> FleetKey:
        return (self.namespace, self.name)


class FleetObserver(Protocol):
    """Gathers one :class:`FleetSignals` of a fleet (:class:`~shoal.operator.sources.ClusterObserver`: engine
    metrics plus gateway demand); ``missing`` says what failed."""

    async def observe(self, fleet: FleetRef, desired: int, now: float) -> FleetSignals: ...

    def forget(self, key: FleetKey) -> None: ...


PolicyFactory = Callable[[AutoscalingConfig], ScalingPolicy]


def autoscaling_config(spec: InferenceDeploymentSpec) -> AutoscalingConfig:
    """The policy's knobs from the CRD. ``min: 0`` needs a gateway (it holds the requests that bring the fleet
    back from zero and reports them), so without one the policy's floor is 1; the status says why."""
    scaling = spec.autoscaling
    return AutoscalingConfig(
        min_replicas=max(spec.replicas.min, 0 if spec.gateway.replicas > 0 else 1),
        max_replicas=spec.replicas.max,
        queue_depth_per_replica=scaling.queue_depth_per_replica,
        ttft_p95_seconds=scaling.ttft_p95_seconds,
        scale_up_stabilization_seconds=scaling.scale_up_stabilization_seconds,
        scale_down_stabilization_seconds=scaling.scale_down_stabilization_seconds,
        max_step=scaling.max_step,
        burst_memory_seconds=float(scaling.burst_memory_seconds),
        predictive=scaling.predictive.enabled,
        season_seconds=float(scaling.predictive.season_seconds),
    )


@dataclass
class _Fleet:
    config: AutoscalingConfig
    policy: ScalingPolicy


def _rounded(value: float | None) -> float | None:
    """Three significant digits: enough to read, and an unchanged world writes an unchanged status."""
    return None if value is None else float(f"{value:.3g}")


class FleetAutoscaler:
    """Each fleet's policy and firing alerts, and the observer that feeds them (see the module docstring)."""

    def __init__(
        self,
        observer: FleetObserver,
        policies: PolicyFactory = ShoalPolicy,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 5.0,
    ) -> None:
        self.observer, self.policies, self.clock, self.timeout_s = observer, policies, clock, timeout_s
        self._fleets: dict[FleetKey, _Fleet] = {}
        self._firing: dict[FleetKey, set[str]] = {}

    def _fleet(self, fleet: FleetRef) -> _Fleet:
        config = autoscaling_config(fleet.spec)
        state = self._fleets.get(fleet.key)
        if state is None or state.config != config:
            state = self._fleets[fleet.key] = _Fleet(config, self.policies(config))
        return state

    async def evaluate(self, fleet: FleetRef, current: int) -> ScaleDecision:
        """The count the fleet's policy wants now, with the rule, the values it saw and the observed metrics."""
        state = self._fleet(fleet)
        firing = bool(self._firing.get(fleet.key))
        now = self.clock()
        try:
            signals = await asyncio.wait_for(self.observer.observe(fleet, current, now), self.timeout_s)
        except TimeoutError:
            signals = FleetSignals(
                time=now, desired=current, missing=f"metrics source timed out after {self.timeout_s:g}s"
            )
        except Exception as error:  # noqa: BLE001 - any source failure is missing data, never a crash
            log.warning("metrics for %s/%s failed: %s", fleet.namespace, fleet.name, error)
            signals = FleetSignals(time=now, desired=current, missing=f"metrics source failed: {error}")
        signals = replace(signals, time=now, desired=current, alert_firing=firing)
        decision = state.policy.decide(signals)
        replicas, rule, message = decision.replicas, decision.rule, decision.message
        if firing and replicas < current:
            replicas, rule = current, "HoldAlertFiring"
            message = f"an alert fires: scale-down held at {current} ({decision.rule}: {decision.message})"
        waiting = [r.waiting for r in signals.replicas if r.waiting is not None]
        queue = sum(waiting) + signals.held_requests if waiting or signals.held_requests else None
        values = {k: v for k, v in ((k, _rounded(v)) for k, v in decision.values.items()) if v is not None}
        if firing:
            values["alert_firing"] = 1.0
        return ScaleDecision(
            replicas,
            f"{rule}: {message}",
            _rounded(queue),
            _rounded(signals.ttft_p95_seconds),
            rule=rule,
            values=values,
            missing=signals.missing,
            tpot_p90_seconds=_rounded(signals.tpot_p90_seconds),
        )

    def alert(self, key: FleetKey, fingerprint: str, firing: bool) -> bool:
        """Records an alert's state; True when it newly fires (the caller then evaluates the fleet at once)."""
        alerts = self._firing.setdefault(key, set())
        if not firing:
            alerts.discard(fingerprint)
            return False
        new = fingerprint not in alerts
        alerts.add(fingerprint)
        return new

    def forget(self, key: FleetKey) -> None:
        """The InferenceDeployment is gone: drop its policy and alerts."""
        self._fleets.pop(key, None)
        self._firing.pop(key, None)
        self.observer.forget(key)
