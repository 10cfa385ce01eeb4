"""The reconciler: one InferenceDeployment in, its children applied and its status patched out.

It is the only place where the pure parts meet I/O. Every pass runs the same steps: parse the spec (the models
the CRD was generated from), decide the engine count (:mod:`.replicas`: the spec, or the autoscaler's evaluation,
:mod:`.autoscaler`), label which engine pods serve and which wait in the standby pool (:mod:`.standby_pool`), check
what cannot work (:mod:`.diagnosis`), server-side apply the children
(:mod:`.builders`), bring kind shoal's engines to ``spec.adapters`` through their endpoints
(:mod:`.adapter_sync`) and compute the status from what the watches saw of the children and the engines said of
their adapters (:mod:`.status`). Children are applied on every spec change;
after an operator restart and on each status refresh they are applied only when the engine Deployment (seen
through the watch) is missing, at the wrong scale, or carries a digest of other children than the ones wanted
now. Applying an unchanged object would be a no-op for the apiserver anyway; skipping it saves the requests.
The status is patched only where it differs, so a pass over an unchanged world writes nothing.
A problem becomes a Degraded condition and one Event when it first appears; it never raises into a crash loop.

One writer of the engine count: a Deployment whose replicas someone else changed (a person, an HPA) is put back
by the next pass with a Warning Event naming the writer, and ``kubectl scale`` on the InferenceDeployment while
the autoscaler owns the count gets a Warning saying it is ignored. A firing alert runs an extra pass
(``trigger="alert"``) that writes only the engine count; passes over one object never overlap (a lock each).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import kopf
from pydantic import ValidationError

from shoal.operator.adapter_sync import AdapterSync, Observed
from shoal.operator.autoscaler import FleetAutoscaler, FleetRef
from shoal.operator.builders import applied_digest, build_children
from shoal.operator.builders.adapters import at_run_time
from shoal.operator.builders.api_keys import generated_api_key_secret, new_api_key
from shoal.operator.builders.monitoring import MONITORING_GROUP
from shoal.operator.diagnosis import Problem, check_model, diagnose
from shoal.operator.kube import KubeClient, KubeError
from shoal.operator.metrics import ERROR, OK, OperatorMetrics
from shoal.operator.naming import FIELD_MANAGER, Owner
from shoal.operator.replicas import ScaleDecision, decide_replicas
from shoal.operator.sources import replica_targets
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.operator.standby_pool import (
    POOL_LABEL,
    SERVING,
    Pool,
    deployment_replicas,
    engine_pod,
    label_patches,
    pool_count,
    serving_at,
)
from shoal.operator.status import compute_status, condition, status_patch, timestamp

FRESH_DISCOVERY_SECONDS = 5.0  # a burst of creations shares one lookup
# "change": create/update (apply everything); "resume": operator start; "refresh": the periodic status timer;
# "alert": a firing Alertmanager alert's immediate pass (writes only the engine count).
Trigger = Literal["change", "resume", "refresh", "alert"]
Announce = Callable[..., None]  # kopf.event's signature: (body, *, type, reason, message)


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
    autoscaler: FleetAutoscaler | None = None
    clock: Callable[[], datetime] = utcnow
    discovery_seconds: float = 60.0
    engine_images: Mapping[str, str] = field(default_factory=dict)  # --engine-image: the image per engine kind
    monitoring_labels: Mapping[str, str] = field(default_factory=dict)  # --monitoring-label
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    gateway_image: str | None = None  # --gateway-image: for a spec that names none
    adapters: AdapterSync = field(default_factory=AdapterSync)  # kind shoal's run-time adapter loading
    _monitoring: tuple[float, bool] = field(default=(float("-inf"), False))
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)  # one pass per object at a time

    async def prometheus_operator(self, *, fresh: bool) -> bool:
        """Whether the Prometheus Operator's CRDs are served: looked up for every spec change (``fresh``: at
        most 5 s old), otherwise every ``discovery_seconds``, so installing it later is noticed."""
        checked_at, present = self._monitoring
        if time.monotonic() - checked_at > (FRESH_DISCOVERY_SECONDS if fresh else self.discovery_seconds):
            try:
                present = await self.client.serves(
                    f"{MONITORING_GROUP}/v1", "podmonitors"
                ) and await self.client.serves(f"{MONITORING_GROUP}/v1", "prometheusrules")
            except KubeError:
                # a restarted apiserver refuses even discovery (403) until its RBAC cache syncs: what was known
                # holds, and the next pass asks again; with nothing known yet the pass fails and is retried
                if checked_at == float("-inf"):
                    raise
                return present
            self._monitoring = (time.monotonic(), present)
        return present

    async def reconcile(
        self,
        body: kopf.Body,
        patch: kopf.Patch,
        children: Children,
        *,
        trigger: Trigger,
        old_spec: Mapping[str, Any] | None = None,
        announce: Announce = kopf.event,
    ) -> None:
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta["uid"])
        async with self._locks.setdefault((owner.namespace, owner.name), asyncio.Lock()):
            started, result = time.perf_counter(), ERROR
            try:
                problem = await self._reconcile(body, patch, children, owner, trigger, old_spec, announce)
                result = OK if problem is None else problem.reason
            finally:
                self.metrics.reconciles.labels(trigger, result).inc()
                self.metrics.reconcile_duration.labels(trigger).observe(time.perf_counter() - started)

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: drop its lock and its metrics."""
        self._locks.pop((namespace, name), None)
        self.adapters.forget((namespace, name))
        self.metrics.forget(namespace, name)

    async def _reconcile(
        self,
        body: kopf.Body,
        patch: kopf.Patch,
        children: Children,
        owner: Owner,
        trigger: Trigger,
        old_spec: Mapping[str, Any] | None,
        announce: Announce,
    ) -> Problem | None:
        """One pass; returns the problem it found (None: none, or a refresh that left the pass to a change)."""
        meta = body["metadata"]
        previous: Mapping[str, Any] = body.get("status") or {}
        now = self.clock()
        try:
            spec = InferenceDeploymentSpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError as error:
            invalid = Problem("InvalidSpec", _first_error(error))
            self._report(body, patch, previous, invalid, now, announce)
            return invalid
        if trigger == "refresh" and previous.get("observedGeneration") != meta.get("generation"):
            return None  # a change handler has this generation in hand; a refresh must not race it
        current = previous.get("desiredReplicas")
        proposal = await self._propose(owner, spec, current, children)
        decision = decide_replicas(spec, current, proposal)
        self.metrics.decided(owner.namespace, owner.name, decision.replicas, proposal.rule if proposal else None)
        engines = deployment_replicas(spec, decision.replicas)
        warnings = _ignored_scale(spec, old_spec, decision) + _overridden(children, previous, decision, engines)
        moves = label_patches(list(map(engine_pod, children.engine_pods)), decision.replicas, spec.autoscaling.standby)
        problem = check_model(spec.model.source)
        if problem is None:
            problem = await self._move(owner, moves)  # before the Service's selector may first ask for the label
        if problem is None and trigger == "alert":
            problem = await self._scale(owner, children, engines)
        elif problem is None:
            monitoring = await self.prometheus_operator(fresh=trigger == "change")
            wanted = build_children(
                owner,
                spec,
                decision.replicas,
                prometheus_operator=monitoring,
                engine_images=self.engine_images,
                monitoring_labels=self.monitoring_labels,
                gateway_image=self.gateway_image,
            )
            if trigger == "change" or _drifted(children, wanted, engines):
                problem = await self._ensure_api_keys(owner, spec) or await self._apply(wanted)
        problem = problem or diagnose(
            spec.model.source, children.engine_pods, spec.engine.kind, spec.engine.resources.gpu_resource_name
        )
        observed = await self._sync_adapters(owner, spec, children, sync=trigger != "alert")
        new = compute_status(
            spec=spec,
            generation=meta.get("generation", 0),
            previous=previous,
            decision=decision,
            engine=children.engine,
            gateway=children.gateway,
            problem=problem,
            selector=f"{owner.selector_string('engine')},{POOL_LABEL}={SERVING}",
            now=now,
            proposal=proposal,
            engine_pods=children.engine_pods,
            adapters_observed=observed,
            pool=pool_count(children.engine_pods, moves),
        )
        for reason, message in warnings:
            announce(body, type="Warning", reason=reason, message=message)
        _announce(body, previous, new, announce)
        patch.status.update(status_patch(previous, new))
        return problem

    async def _propose(
        self, owner: Owner, spec: InferenceDeploymentSpec, current: int | None, children: Children
    ) -> ScaleDecision | None:
        """The autoscaler's evaluation (None while autoscaling is off or no autoscaler runs). It observes the
        count that really runs (the last applied one, or in Recommend mode the spec's) and the pods serving at that
        count: never the standby pool."""
        if not spec.autoscaling.enabled or self.autoscaler is None:
            return None
        running = spec.replicas.fixed if spec.autoscaling.mode == "Recommend" else current
        running = spec.replicas.min if running is None else running
        serving = serving_at(children.engine_pods, running, spec.autoscaling.standby)
        fleet = FleetRef(owner.namespace, owner.name, spec, replica_targets(serving))
        return await self.autoscaler.evaluate(fleet, running)

    async def _sync_adapters(
        self, owner: Owner, spec: InferenceDeploymentSpec, children: Children, sync: bool
    ) -> Observed | None:
        """Kind shoal's engines brought to ``spec.adapters`` at run time (``sync`` false: an alert's pass reports
        the last sync without a new one); what each ready pod serves (None: the adapters are on another kind's
        command line, or there are none)."""
        key = (owner.namespace, owner.name)
        if not at_run_time(spec):
            self.adapters.forget(key)
            return None
        wanted = [(a.name, a.source) for a in spec.adapters]
        return await self.adapters.observe(key, children.engine_pods, wanted, spec.served_name, sync)

    async def _move(self, owner: Owner, moves: Mapping[str, Pool]) -> Problem | None:
        """The standby pool's label patches (a pod gone meanwhile needs none)."""
        for pod, pool in sorted(moves.items()):
            try:
                await self.client.label_pod(owner.namespace, pod, {POOL_LABEL: pool})
            except KubeError as error:
                if error.status != 404:
                    return Problem("ApplyFailed", f"Pod {pod} ({POOL_LABEL}={pool}): {error}")
        return None

    async def _scale(self, owner: Owner, children: Children, engines: int) -> Problem | None:
        """An alert's pass writes only the engine count (one request, not every child; the pool's label moves
        before it): fast, and the next refresh finds nothing drifted. ``engines``: the Deployment's replicas."""
        engine = children.engine
        if engine is None or engine.get("spec", {}).get("replicas") == engines:
            return None
        try:
            await self.client.scale(owner.namespace, owner.engine_name, engines)
        except KubeError as error:
            return Problem("ApplyFailed", f"Deployment {owner.engine_name}: {error}")
        return None

    async def _ensure_api_keys(self, owner: Owner, spec: InferenceDeploymentSpec) -> Problem | None:
        """Auth on by default: without a given API-key Secret, create one with a new key, once."""
        if spec.gateway.api_key_secret is not None:
            return None
        secret = generated_api_key_secret(owner, new_api_key())
        try:
            await self.client.create_once(secret)
        except KubeError as error:
            return Problem("ApplyFailed", f"Secret {secret['metadata']['name']}: {error}")
        return None

    async def _apply(self, wanted: list[dict[str, Any]]) -> Problem | None:
        for child in wanted:
            try:
                await self.client.apply(child)
            except KubeError as error:
                return Problem("ApplyFailed", f"{child['kind']} {child['metadata']['name']}: {error}")
        return None

    def _report(
        self,
        body: kopf.Body,
        patch: kopf.Patch,
        previous: Mapping[str, Any],
        problem: Problem,
        now: datetime,
        announce: Announce,
    ) -> None:
        """A spec that cannot be parsed: only the Degraded condition changes (nothing else can be computed)."""
        conditions = list(previous.get("conditions", []))
        degraded = condition(
            conditions,
            "Degraded",
            (True, problem.reason, problem.message),
            timestamp(now),
            body["metadata"].get("generation", 0),
        )
        new = {**previous, "conditions": _replaced(conditions, degraded.model_dump(by_alias=True))}
        _announce(body, previous, new, announce)
        patch.status.update(status_patch(previous, new))


def _drifted(children: Children, wanted: list[dict[str, Any]], engines: int) -> bool:
    """A Deployment is missing, the engines are not at the decided scale, or what was last applied differs from
    what is wanted now (a new operator version, the Prometheus Operator arriving): re-apply."""
    if children.engine is None or children.gateway is None:
        return True
    engine = next(c for c in wanted if c["kind"] == "Deployment")
    return applied_digest(children.engine) != applied_digest(engine) or (
        children.engine.get("spec", {}).get("replicas") != engines
    )


def _replaced(conditions: list[Mapping[str, Any]], new: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``conditions`` with the one of ``new``'s type replaced in place (or ``new`` appended)."""
    kept = [new if c.get("type") == new["type"] else c for c in conditions]
    return kept if new in kept else [*kept, new]


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), {})


def _ignored_scale(
    spec: InferenceDeploymentSpec, old_spec: Mapping[str, Any] | None, decision: ScaleDecision
) -> list[tuple[str, str]]:
    """``kubectl scale`` (or an HPA) wrote ``replicas.count`` while the autoscaler owns the count: say so."""
    if not spec.autoscaling.enabled or spec.autoscaling.mode != "Act" or old_spec is None:
        return []
    before = (old_spec.get("replicas") or {}).get("count")
    if before == spec.replicas.count or spec.replicas.count is None:
        return []
    return [
        (
            "ScaleIgnored",
            f"replicas.count was set to {spec.replicas.count} (kubectl scale, or an HPA on the "
            f"scale subresource) while autoscaling is enabled: the autoscaler owns the engine count, which stays "
            f"{decision.replicas}",
        )
    ]


def _overridden(
    children: Children, previous: Mapping[str, Any], decision: ScaleDecision, engines: int
) -> list[tuple[str, str]]:
    """Someone other than the operator changed the engine Deployment's replicas (a person, an HPA): it is put
    back by this pass to ``engines`` (the serving count plus the pool); the Warning names who did it, from the
    Deployment's managedFields."""
    engine = children.engine
    if engine is None or previous.get("desiredReplicas") != decision.replicas:
        return []  # no Deployment yet, or the count is changing now: the difference is ours
    replicas = engine.get("spec", {}).get("replicas")
    writers = [m for m in engine.get("metadata", {}).get("replicasManagers", []) if m != FIELD_MANAGER]
    if replicas == engines or not writers:
        return []
    return [
        (
            "ReplicasOverridden",
            f"the engine Deployment's replicas were set to {replicas} by "
            f"{', '.join(writers)}; the operator owns that count (set it in the InferenceDeployment): put back "
            f"to {engines}",
        )
    ]


def _announce(body: kopf.Body, previous: Mapping[str, Any], new: Mapping[str, Any], announce: Announce) -> None:
    """One Event per new problem and per scaling decision or recommendation, not one per pass."""
    before, after = _condition(previous, "Degraded"), _condition(new, "Degraded")
    if after.get("status") == "True" and (before.get("status"), before.get("reason"), before.get("message")) != (
        "True",
        after.get("reason"),
        after.get("message"),
    ):
        announce(body, type="Warning", reason=after["reason"], message=after["message"])
    history = new.get("history") or []
    if history and history != (previous.get("history") or []):
        record = history[-1]
        applied = record.get("applied", True)
        if applied and previous.get("desiredReplicas") is None:
            return  # the first count of a new object is no scaling decision
        announce(
            body,
            type="Normal",
            reason="Scaled" if applied else "ScaleRecommended",
            message=f"engines {record['fromReplicas']} -> {record['toReplicas']}"
            f"{'' if applied else ' recommended (mode: Recommend)'}: {record['reason']}",
        )


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
