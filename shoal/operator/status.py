"""The InferenceDeployment status, computed from what the children report: a pure function.

Conditions follow the Kubernetes conventions: ``Ready`` (the fleet serves now), ``Progressing`` (a rollout or
scale is under way), ``Degraded`` (something the operator cannot fix by waiting; the reason and message say
what), ``ModelReady`` (the engine pods have the model: :mod:`.model_ready`), with ``spec.adapters``
``AdaptersReady`` (and ``adapters``, where each is loaded: :mod:`.adapters_ready`) and, while autoscaling is on,
``ScalingLimited`` (the autoscaler's wish was clamped, or metrics are missing) and ``DrainFits`` (the engines'
termination grace lets a request of ``maxModelLen`` tokens finish at the observed time per output token:
:func:`.termination.drain_verdict`), and with ``autoscaling.standby`` ``StandbyPool`` (True once every pool pod
is Ready: :mod:`.standby_pool`). The replica counts and ``Ready`` are the serving engines'; the pool is
``standbyReplicas``, and ``Progressing`` waits for both. Every condition comes from :func:`condition`, so each
carries ``observedGeneration`` and a ``lastTransitionTime`` that changes only when its status does; the scaling
history grows only when the desired count does. Recomputing an unchanged world therefore yields an identical
status: the reconciler then writes nothing. The status is built as the typed :class:`.InferenceDeploymentStatus` (the model the CRD's schema is
generated from) and stored as its camelCase dump.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from shoal.operator.adapter_plan import PodAdapters
from shoal.operator.adapters_ready import adapters_ready, loaded
from shoal.operator.diagnosis import Problem
from shoal.operator.model_ready import model_ready
from shoal.operator.replicas import ScaleDecision
from shoal.operator.spec import (
    MAX_SCALING_HISTORY,
    Condition,
    InferenceDeploymentSpec,
    InferenceDeploymentStatus,
    ScalingDecisionStatus,
    ScalingRecord,
)
from shoal.operator.standby_pool import NO_POOL, PoolCount
from shoal.operator.termination import drain_verdict

Status = dict[str, Any]
Verdict = tuple[bool, str, str]  # a condition's (status, reason, message)


def timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    previous: Sequence[Mapping[str, Any]], kind: str, verdict: Verdict, stamp: str, generation: int
) -> Condition:
    """The one condition builder: ``lastTransitionTime`` keeps its previous value unless the status flips."""
    status, reason, message = verdict
    text = "True" if status else "False"
    before = next((c for c in previous if c.get("type") == kind), None)
    since = stamp if before is None or before.get("status") != text else before.get("lastTransitionTime", stamp)
    return Condition(
        type=kind,
        status=text,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )


def dump(status: InferenceDeploymentStatus) -> Status:
    """The stored (camelCase) form: only the fields that were set, so records keep the shape they were written in."""
    return status.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)


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
    engine_pods: Sequence[Mapping[str, Any]] = (),
    adapters_observed: Mapping[str, PodAdapters] | None = None,
    pool: PoolCount = NO_POOL,
) -> Status:
    """The whole new status (camelCase, as stored). ``proposal`` is the autoscaler's latest evaluation (applied as
    ``decision`` in Act mode, only recorded in Recommend mode); ``adapters_observed``, where the engines load
    adapters at run time (kind shoal), what each ready pod's last sync saw; ``pool``: the standby pool's pods (the
    Deployment's counts less these are the serving engines)."""
    stamp = timestamp(now)
    replicas, ready, _ = _counts(engine)
    standby = spec.autoscaling.standby
    serving, serving_ready = max(0, replicas - pool.pods), max(0, ready - pool.ready)
    verdicts = {
        "Ready": _ready(decision.replicas, serving_ready, _counts(gateway)[1], spec.gateway.replicas, problem),
        "Progressing": _progressing(engine, decision.replicas, standby, replicas, problem),
        "Degraded": (True, problem.reason, problem.message) if problem else (False, "AsExpected", ""),
        "ModelReady": model_ready(spec.model.source, engine_pods),
    }
    adapters = loaded([a.name for a in spec.adapters], engine_pods, adapters_observed) if spec.adapters else None
    if adapters is not None:
        verdicts["AdaptersReady"] = adapters_ready(adapters, engine_pods, adapters_observed)
    observed = _observed(proposal or decision, previous)
    if spec.autoscaling.enabled:
        verdicts |= {
            "ScalingLimited": _scaling_limited(spec, decision),
            "MetricsAvailable": _metrics(proposal),
            "DrainFits": _drain_fits(spec, observed.get("tpot_p90_seconds")),
        }
    if standby:
        verdicts["StandbyPool"] = _standby_pool(standby, pool)
    old_conditions = list(previous.get("conditions", []))
    history, last_scale_time = _history(previous, decision, proposal, spec, problem, stamp)
    fields: dict[str, Any] = {
        "served_name": spec.served_name,
        "replicas": serving,
        "ready_replicas": serving_ready,
        **({"standby_replicas": pool.pods} if standby or pool.pods else {}),
        "desired_replicas": decision.replicas,
        "conditions": [condition(old_conditions, kind, v, stamp, generation) for kind, v in verdicts.items()],
        "observed_generation": generation,
        "selector": selector,
        "history": history,
        "last_scale_time": last_scale_time,
        **observed,
        **({"adapters": adapters} if adapters is not None else {}),
    }
    if spec.autoscaling.enabled and proposal is not None:
        fields["last_decision"] = _last_decision(
            previous.get("lastDecision"), proposal, stamp, spec.autoscaling.mode == "Act"
        )
    return dump(InferenceDeploymentStatus(**fields))


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


def _ready(desired: int, ready: int, gateway_ready: int, gateways: int, problem: Problem | None) -> Verdict:
    if problem is not None:
        return False, problem.reason, problem.message
    if desired == 0:
        return False, "ScaledToZero", "no engine replicas are wanted"
    if ready < desired:
        return False, "EnginesNotReady", f"{ready}/{desired} engines ready"
    if gateway_ready < gateways:
        return False, "GatewayNotReady", f"{gateway_ready}/{gateways} gateways ready"
    return True, "Ready", f"{ready}/{desired} engines and {gateway_ready}/{gateways} gateways ready"


def _progressing(
    engine: Mapping[str, Any] | None, desired: int, standby: int, replicas: int, problem: Problem | None
) -> Verdict:
    """The Deployment holds ``desired`` serving engines plus ``standby`` in the pool."""
    if problem is not None and engine is None:
        return False, "Blocked", problem.message
    if engine is None:
        return True, "Creating", "creating the engine Deployment"
    pool = f" (with {standby} standby)" if standby else ""
    if not _rolled_out(engine, desired + standby):
        return True, "RollingOut", f"{replicas} engines running, {desired + standby} wanted{pool}"
    return False, "Stable", f"{desired} engines at the current spec{pool}"


def _standby_pool(standby: int, pool: PoolCount) -> Verdict:
    """``StandbyPool``: True once the pool holds ``standby`` Ready engines (a scale-up then promotes, not starts)."""
    if pool.ready >= standby:
        return True, "Ready", f"{pool.ready} of {standby} standby engines ready"
    return False, "Filling", f"{pool.ready} of {standby} standby engines ready, {pool.pods - pool.ready} loading"


def _scaling_limited(spec: InferenceDeploymentSpec, decision: ScaleDecision) -> Verdict:
    """``ScalingLimited``: the autoscaler's wish was clamped, or it had nothing to go on."""
    desired = decision.replicas
    if decision.limited == "NoGateway" or (spec.replicas.min == 0 and spec.gateway.replicas == 0):
        return (
            True,
            "NoGateway",
            "replicas.min is 0 but gateway.replicas is 0: nothing would hold requests "
            f"or report demand at zero engines, so {desired} stays",
        )
    if decision.limited:
        return True, decision.limited, f"{decision.reason}; clamped to {desired}"
    if decision.reason.startswith("MetricsMissing"):
        return True, "MetricsMissing", decision.reason
    return False, "WithinBounds", decision.reason


def _metrics(proposal: ScaleDecision | None) -> Verdict:
    """``MetricsAvailable``: whether the metrics source saw the fleet."""
    if proposal is None:
        return False, "NoAutoscaler", "no autoscaler evaluates this fleet"
    if proposal.missing is not None:
        return False, "MetricsMissing", f"{proposal.missing}; the engine count is held"
    return True, "Observed", "the metrics source observed the fleet"


def _observed(observed: ScaleDecision, previous: Mapping[str, Any]) -> dict[str, float]:
    """The demand the count was decided on (the printer columns), where it was measured, and the last observed time
    per output token (kept through windows without tokens, so an idle fleet's ``DrainFits`` does not flap)."""
    fields = {
        "queue_depth": observed.queue_depth,
        "ttft_p95_seconds": observed.ttft_p95_seconds,
        "tpot_p90_seconds": observed.tpot_p90_seconds or previous.get("tpotP90Seconds"),
    }
    return {key: value for key, value in fields.items() if value is not None}


def _drain_fits(spec: InferenceDeploymentSpec, tpot_s: float | None) -> Verdict:
    engine = spec.engine
    return drain_verdict(engine.max_model_len, tpot_s, engine.resources.gpus, engine.termination_grace_period_seconds)


def _history(
    previous: Mapping[str, Any],
    decision: ScaleDecision,
    proposal: ScaleDecision | None,
    spec: InferenceDeploymentSpec,
    problem: Problem | None,
    stamp: str,
) -> tuple[list[ScalingRecord], str | None]:
    """The scaling history and ``lastScaleTime``: a record per change of the engine count and, in Recommend mode,
    per change of the recommendation; the first count of an object that cannot run is no change."""
    history = [ScalingRecord.model_validate(r) for r in previous.get("history", [])]
    last_scale_time = previous.get("lastScaleTime") or None
    before, desired = previous.get("desiredReplicas"), decision.replicas
    if before != desired and not (before is None and problem is not None):
        history.append(_change(stamp, before or 0, desired, decision, applied=True))
        last_scale_time = stamp
    if spec.autoscaling.enabled and proposal is not None and spec.autoscaling.mode != "Act":
        recommended = (previous.get("lastDecision") or {}).get("replicas", desired)
        if recommended != proposal.replicas:
            history.append(_change(stamp, recommended, proposal.replicas, proposal, applied=False))
    return history[-MAX_SCALING_HISTORY:], last_scale_time


def _change(stamp: str, before: int, after: int, decision: ScaleDecision, *, applied: bool) -> ScalingRecord:
    record: dict[str, Any] = {"time": stamp, "from_replicas": before, "to_replicas": after, "reason": decision.reason}
    if decision.rule is not None:
        record |= {"rule": decision.rule, "values": dict(decision.values), "applied": applied}
    return ScalingRecord(**record)


def _last_decision(
    before: Mapping[str, Any] | None, proposal: ScaleDecision, stamp: str, applied: bool
) -> ScalingDecisionStatus:
    """The autoscaler's latest evaluation; its time moves only when what it says does (no write per pass)."""
    last = ScalingDecisionStatus(
        time=stamp,
        replicas=proposal.replicas,
        rule=proposal.rule or "",
        message=proposal.reason,
        values=dict(proposal.values),
        applied=applied,
    )
    if before is not None and {**before, "time": stamp} == last.model_dump(by_alias=True):
        return ScalingDecisionStatus.model_validate(before)
    return last


def status_patch(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning ``previous`` into ``new`` at the top level; empty when nothing changed."""
    patch = {key: value for key, value in new.items() if previous.get(key) != value}
    patch.update({key: None for key in previous if key not in new and previous[key] is not None})
    return patch
