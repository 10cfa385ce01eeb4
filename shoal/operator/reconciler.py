"""The reconciler: one InferenceDeployment in, its children applied and its status patched out.

It is the only place where the pure parts meet I/O. Every pass runs the same steps: parse the spec (the models
the CRD was generated from), decide the engine count (:mod:`.replicas`: the spec, or the autoscaler's hook),
check what cannot work (:mod:`.diagnosis`), server-side apply the children (:mod:`.builders`) and compute the
status from what the watches saw of the children (:mod:`.status`). Children are applied on every spec change;
after an operator restart and on each status refresh they are applied only when the engine Deployment (seen
through the watch) is missing, at the wrong scale, or carries a digest of other children than the ones wanted
now. Applying an unchanged object would be a no-op for the apiserver anyway; skipping it saves the requests.
The status is patched only where it differs, so a pass over an unchanged world writes nothing.
A problem becomes a Degraded condition and one Event when it first appears; it never raises into a crash loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import kopf
from pydantic import ValidationError

from shoal.operator.builders import applied_digest, build_children
from shoal.operator.builders.monitoring import MONITORING_GROUP
from shoal.operator.diagnosis import Problem, check_model, diagnose
from shoal.operator.kube import KubeClient, KubeError
from shoal.operator.naming import Owner
from shoal.operator.replicas import Autoscaler, ScaleDecision, decide_replicas
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.operator.status import compute_status, status_patch

FRESH_DISCOVERY_SECONDS = 5.0  # a burst of creations shares one lookup
# "change": create/update (apply everything); "resume": operator start; "refresh": the periodic status timer.
Trigger = Literal["change", "resume", "refresh"]


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

    async def reconcile(self, body: kopf.Body, patch: kopf.Patch, children: Children, *, trigger: Trigger) -> None:
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta["uid"])
        previous: Mapping[str, Any] = body.get("status") or {}
        now = self.clock()
        try:
            spec = InferenceDeploymentSpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError as error:
            self._report(body, patch, previous, Problem("InvalidSpec", _first_error(error)))
            return
        if trigger == "refresh" and previous.get("observedGeneration") != meta.get("generation"):
            return  # a change handler has this generation in hand; a refresh must not race it
        decision = decide_replicas(owner.name, spec, previous.get("desiredReplicas"), now, self.autoscaler)
        problem = check_model(spec.model.source)
        if problem is None:
            monitoring = await self.prometheus_operator(fresh=trigger == "change")
            wanted = build_children(owner, spec, decision.replicas, prometheus_operator=monitoring)
            if trigger == "change" or _drifted(children, wanted, decision):
                problem = await self._apply(wanted)
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

    async def _apply(self, wanted: list[dict[str, Any]]) -> Problem | None:
        for child in wanted:
            try:
                await self.client.apply(child)
            except KubeError as error:
                return Problem("ApplyFailed", f"{child['kind']} {child['metadata']['name']}: {error}")
        return None

    def _report(self, body: kopf.Body, patch: kopf.Patch, previous: Mapping[str, Any], problem: Problem) -> None:
        conditions = [c for c in previous.get("conditions", []) if c.get("type") != "Degraded"]
        degraded = {"type": "Degraded", "status": "True", "reason": problem.reason, "message": problem.message}
        new = {**previous, "conditions": conditions + [degraded]}
        _announce(body, previous, new)
        patch.status.update(status_patch(previous, new))


def _drifted(children: Children, wanted: list[dict[str, Any]], decision: ScaleDecision) -> bool:
    """A Deployment is missing, the engines are not at the decided scale, or what was last applied differs from
    what is wanted now (a new operator version, the Prometheus Operator arriving): re-apply."""
    if children.engine is None or children.gateway is None:
        return True
    engine = next(c for c in wanted if c["kind"] == "Deployment")
    return applied_digest(children.engine) != applied_digest(engine) or (
        children.engine.get("spec", {}).get("replicas") != decision.replicas
    )


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
