"""The reconciler: one InferenceDeployment in, its children applied and its status patched out.

It is the only place where the pure parts meet I/O. Every pass runs the same steps: parse the spec (the models
the CRD was generated from), decide the engine count (:mod:`.replicas`: the spec, or the autoscaler's hook),
check what cannot work (:mod:`.diagnosis`), server-side apply the children (:mod:`.builders`) and compute the
status from what the watches saw of the children (:mod:`.status`). Children are re-applied on every spec
change and whenever one is missing or at the wrong scale; applying an unchanged object is a no-op for the
apiserver, and the status is patched only where it differs, so a pass over an unchanged world writes nothing.
A problem becomes a Degraded condition and one Event when it first appears; it never raises into a crash loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from shoal.operator.builders import build_children
from shoal.operator.builders.monitoring import MONITORING_GROUP
from shoal.operator.diagnosis import Problem, check_model, diagnose
from shoal.operator.kube import KubeClient, KubeError
from shoal.operator.naming import Owner
from shoal.operator.replicas import Autoscaler, ScaleDecision, decide_replicas
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.operator.status import compute_status, status_patch

FRESH_DISCOVERY_SECONDS = 5.0  # a burst of creations shares one lookup
Lookup = Callable[[tuple[str, ...]], Iterable[Mapping[str, Any]]]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Children:
    """What the watches currently know of one InferenceDeployment's children (from kopf indices)."""

    engine: Mapping[str, Any] | None
    gateway: Mapping[str, Any] | None
    engine_pods: list[Mapping[str, Any]]


@dataclass
class Reconciler:
    client: KubeClient
    autoscaler: Autoscaler | None = None
    clock: Callable[[], datetime] = utcnow
    discovery_seconds: float = 60.0
    _monitoring: tuple[float, bool] = field(default=(float("-inf"), False))
    # uid -> whether the Prometheus Operator was there when its children were last applied
    _applied_monitoring: dict[str, bool] = field(default_factory=dict)

    async def prometheus_operator(self, *, fresh: bool) -> bool:
        """Whether the Prometheus Operator's CRDs are served: looked up for every spec change (``fresh``: at
        most 5 s old), otherwise every ``discovery_seconds``, so installing it later is noticed."""
        checked_at, present = self._monitoring
        if time.monotonic() - checked_at > (FRESH_DISCOVERY_SECONDS if fresh else self.discovery_seconds):
            present = await self.client.serves(f"{MONITORING_GROUP}/v1", "podmonitors") and await self.client.serves(
                f"{MONITORING_GROUP}/v1", "prometheusrules"
            )
            self._monitoring = (time.monotonic(), present)
        return present

    async def reconcile(self, body: kopf.Body, patch: kopf.Patch, children: Children, *, spec_changed: bool) -> None:
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta["uid"])
        previous: Mapping[str, Any] = body.get("status") or {}
        now = self.clock()
        try:
            spec = InferenceDeploymentSpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError as error:
            self._report(body, patch, previous, Problem("InvalidSpec", _first_error(error)))
            return
        decision = decide_replicas(owner.name, spec, previous.get("desiredReplicas"), now, self.autoscaler)
        problem = check_model(spec.model.source)
        monitoring = await self.prometheus_operator(fresh=spec_changed)
        reconciled_before = previous.get("observedGeneration") == meta.get("generation")
        drifted = _drifted(children, decision) or self._applied_monitoring.get(owner.uid) != monitoring
        if problem is None and (spec_changed or (reconciled_before and drifted)):
            problem = await self._apply(owner, spec, decision, monitoring)
        problem = problem or diagnose(spec.model.source, children.engine_pods)
        new = compute_status(
            spec=spec,
            generation=meta.get("generation", 0),
            previous=previous,
            decision=decision,
            engine=children.engine,
            gateway=children.gateway,
            problem=problem,
            selector=owner.selector_string("engine"),
            now=now,
        )
        _announce(body, previous, new)
        patch.status.update(status_patch(previous, new))

    def forget(self, uid: str) -> None:
        """The InferenceDeployment is gone."""
        self._applied_monitoring.pop(uid, None)

    async def _apply(
        self, owner: Owner, spec: InferenceDeploymentSpec, decision: ScaleDecision, monitoring: bool
    ) -> Problem | None:
        for child in build_children(owner, spec, decision.replicas, prometheus_operator=monitoring):
            try:
                await self.client.apply(child)
            except KubeError as error:
                return Problem("ApplyFailed", f"{child['kind']} {child['metadata']['name']}: {error}")
        self._applied_monitoring[owner.uid] = monitoring
        return None

    def _report(self, body: kopf.Body, patch: kopf.Patch, previous: Mapping[str, Any], problem: Problem) -> None:
        conditions = [c for c in previous.get("conditions", []) if c.get("type") != "Degraded"]
        degraded = {"type": "Degraded", "status": "True", "reason": problem.reason, "message": problem.message}
        new = {**previous, "conditions": conditions + [degraded]}
        _announce(body, previous, new)
        patch.status.update(status_patch(previous, new))


def _drifted(children: Children, decision: ScaleDecision) -> bool:
    """A child is missing, or the engines are not at the decided scale: re-apply. (Acted on only for objects
    a change handler has reconciled, so a status refresh never races the first apply.)"""
    if children.engine is None or children.gateway is None:
        return True
    return children.engine.get("spec", {}).get("replicas") != decision.replicas


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), {})


def _announce(body: kopf.Body, previous: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """One Event per new problem and per scaling decision, not one per pass."""
    before, after = _condition(previous, "Degraded"), _condition(new, "Degraded")
    if after.get("status") == "True" and (before.get("status"), before.get("reason"), before.get("message")) != (
        "True", after.get("reason"), after.get("message")
    ):
        kopf.event(body, type="Warning", reason=after["reason"], message=after["message"])
    if previous.get("desiredReplicas") not in (None, new.get("desiredReplicas")):
        record = new["history"][-1]
        kopf.event(
            body,
            type="Normal",
            reason="Scaled",
            message=f"engines {record['fromReplicas']} -> {record['toReplicas']}: {record['reason']}",
        )


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
