"""The InferenceDeployment status, computed from what the children report: a pure function.

Conditions follow the Kubernetes conventions: ``Ready`` (the fleet serves now), ``Progressing`` (a rollout or
scale is under way), ``Degraded`` (something the operator cannot fix by waiting; the reason and message say
what) and, while autoscaling is on, ``ScalingLimited`` (the autoscaler's wish was clamped, or metrics are
missing). A condition's ``lastTransitionTime`` changes only when its status does, and the scaling history grows
only when the desired count does, so recomputing an unchanged world yields an identical status: the reconciler
then writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from shoal.operator.diagnosis import Problem
from shoal.operator.replicas import ScaleDecision
from shoal.operator.spec import MAX_SCALING_HISTORY, InferenceDeploymentSpec

Status = dict[str, Any]


def timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    previous: list[Mapping[str, Any]], kind: str, status: bool, reason: str, message: str, now: str, generation: int
) -> dict[str, Any]:
    text = "True" if status else "False"
    before = next((c for c in previous if c.get("type") == kind), None)
    moved = before is None or before.get("status") != text
    return {
        "type": kind,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now if moved else before.get("lastTransitionTime", now),
        "observedGeneration": generation,
    }


def _counts(deployment: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """(replicas, ready, updated) from a Deployment's status; zeros when it does not exist yet."""
    status = (deployment or {}).get("status", {})
    return status.get("replicas", 0), status.get("readyReplicas", 0), status.get("updatedReplicas", 0)


def _rolled_out(deployment: Mapping[str, Any] | None, desired: int) -> bool:
    if deployment is None:
        return False
    replicas, _, updated = _counts(deployment)
    caught_up = deployment.get("status", {}).get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
    return caught_up and replicas == desired and updated == desired


def compute_status(
    *,
    spec: InferenceDeploymentSpec,
    generation: int,
    previous: Mapping[str, Any],
    decision: ScaleDecision,
    engine: Mapping[str, Any] | None,
    gateway: Mapping[str, Any] | None,
    problem: Problem | None,
    selector: str,
    now: datetime,
    proposal: ScaleDecision | None = None,
) -> Status:
    """The whole new status (camelCase, as stored). ``proposal`` is the autoscaler's latest evaluation (applied as
    ``decision`` in Act mode, only recorded in Recommend mode)."""
    stamp = timestamp(now)
    old_conditions = list(previous.get("conditions", []))
    desired = decision.replicas
    replicas, ready, _ = _counts(engine)
    _, gateway_ready, _ = _counts(gateway)
    gateways = spec.gateway.replicas

    if problem is not None:
        ready_cond = (False, problem.reason, problem.message)
    elif desired == 0:
        ready_cond = (False, "ScaledToZero", "no engine replicas are wanted")
    elif ready < desired:
        ready_cond = (False, "EnginesNotReady", f"{ready}/{desired} engines ready")
    elif gateway_ready < gateways:
        ready_cond = (False, "GatewayNotReady", f"{gateway_ready}/{gateways} gateways ready")
    else:
        ready_cond = (True, "Ready", f"{ready}/{desired} engines and {gateway_ready}/{gateways} gateways ready")

    if problem is not None and engine is None:
        progressing = (False, "Blocked", problem.message)
    elif engine is None:
        progressing = (True, "Creating", "creating the engine Deployment")
    elif not _rolled_out(engine, desired):
        progressing = (True, "RollingOut", f"{replicas} engines running, {desired} wanted")
    else:
        progressing = (False, "Stable", f"{desired} engines at the current spec")

    degraded = (True, problem.reason, problem.message) if problem else (False, "AsExpected", "")

    conditions = [
        _condition(old_conditions, "Ready", *ready_cond, stamp, generation),
        _condition(old_conditions, "Progressing", *progressing, stamp, generation),
        _condition(old_conditions, "Degraded", *degraded, stamp, generation),
    ]
    if spec.autoscaling.enabled:
        conditions += _autoscaling_conditions(spec, decision, proposal, old_conditions, stamp, generation)

    status: Status = {
        "replicas": replicas,
        "readyReplicas": ready,
        "desiredReplicas": desired,
        "conditions": conditions,
        "observedGeneration": generation,
        "selector": selector,
        "history": list(previous.get("history", [])),
    }
    if previous.get("lastScaleTime"):
        status["lastScaleTime"] = previous["lastScaleTime"]
    observed = proposal or decision
    if observed.queue_depth is not None:
        status["queueDepth"] = observed.queue_depth
    if observed.ttft_p95_seconds is not None:
        status["ttftP95Seconds"] = observed.ttft_p95_seconds
    before = previous.get("desiredReplicas")
    if before != desired and not (before is None and problem is not None):
        _record(status, _change(stamp, before or 0, desired, decision, applied=True))
        status["lastScaleTime"] = stamp
    if spec.autoscaling.enabled and proposal is not None:
        act = spec.autoscaling.mode == "Act"
        last = _last_decision(previous.get("lastDecision"), proposal, stamp, act)
        status["lastDecision"] = last
        if not act:
            recommended = (previous.get("lastDecision") or {}).get("replicas", desired)
            if recommended != proposal.replicas:
                _record(status, _change(stamp, recommended, proposal.replicas, proposal, applied=False))
    return status


def _change(stamp: str, before: int, after: int, decision: ScaleDecision, *, applied: bool) -> dict[str, Any]:
    record: dict[str, Any] = {"time": stamp, "fromReplicas": before, "toReplicas": after, "reason": decision.reason}
    if decision.rule is not None:
        record |= {"rule": decision.rule, "values": dict(decision.values), "applied": applied}
    return record


def _record(status: Status, record: dict[str, Any]) -> None:
    status["history"] = (status["history"] + [record])[-MAX_SCALING_HISTORY:]


def _last_decision(before: Mapping[str, Any] | None, proposal: ScaleDecision, stamp: str, applied: bool) -> Status:
    """The autoscaler's latest evaluation; its time moves only when what it says does (no write per pass)."""
    last = {"time": stamp, "replicas": proposal.replicas, "rule": proposal.rule or "", "message": proposal.reason,
            "values": dict(proposal.values), "applied": applied}
    if before is not None and {**before, "time": stamp} == last:
        return dict(before)
    return last


def _autoscaling_conditions(
    spec: InferenceDeploymentSpec, decision: ScaleDecision, proposal: ScaleDecision | None,
    old: list[Mapping[str, Any]], stamp: str, generation: int,
) -> list[dict[str, Any]]:
    """``ScalingLimited`` (clamped, or nothing to go on) and ``MetricsAvailable`` (whether the source saw the fleet)."""
    desired = decision.replicas
    if decision.limited == "NoGateway" or (spec.replicas.min == 0 and spec.gateway.replicas == 0):
        limited = (True, "NoGateway", "replicas.min is 0 but gateway.replicas is 0: nothing would hold requests "
                   f"or report demand at zero engines, so {desired} stays")
    elif decision.limited:
        limited = (True, decision.limited, f"{decision.reason}; clamped to {desired}")
    elif decision.reason.startswith("MetricsMissing"):
        limited = (True, "MetricsMissing", decision.reason)
    else:
        limited = (False, "WithinBounds", decision.reason)
    if proposal is None:
        metrics = (False, "NoAutoscaler", "no autoscaler evaluates this fleet")
    elif proposal.missing is not None:
        metrics = (False, "MetricsMissing", f"{proposal.missing}; the engine count is held")
    else:
        metrics = (True, "Observed", "the metrics source observed the fleet")
    return [_condition(old, "ScalingLimited", *limited, stamp, generation),
            _condition(old, "MetricsAvailable", *metrics, stamp, generation)]


def status_patch(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning ``previous`` into ``new`` at the top level; empty when nothing changed."""
    patch = {key: value for key, value in new.items() if previous.get(key) != value}
    patch.update({key: None for key in previous if key not in new and previous[key] is not None})
    return patch

