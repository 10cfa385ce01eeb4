"""kopf wiring: thin handlers that gather what kopf knows and hand it to the :class:`.Reconciler`.

Two kopf indices follow the children through watches (the operator's Deployments, and the engine pods), so a
status refresh reads memory, not the apiserver. Spec changes (create, update, the scale subresource) apply every
child; operator restarts (resume) and a timer every ``resync`` seconds refresh the status from the indices and
re-apply only what drifted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from shoal.operator.builders import DIGEST_ANNOTATION
from shoal.operator.kube import KubeClient
from shoal.operator.naming import COMPONENT_LABEL, FIELD_MANAGER, MANAGED_BY_LABEL, OWNER_LABEL
from shoal.operator.reconciler import Children, Reconciler, Trigger
from shoal.operator.replicas import Autoscaler
from shoal.operator.spec import GROUP, PLURAL, VERSION

ANNOTATION_PREFIX = GROUP


@dataclass(frozen=True)
class OperatorConfig:
    resync_seconds: float = 10.0
    discovery_seconds: float = 60.0
    autoscaler: Autoscaler | None = None


def _first(index: kopf.Index[Any, Any], key: tuple[str, ...]) -> Mapping[str, Any] | None:
    return next(iter(index.get(key, ())), None)


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    """All handlers, registered into a fresh registry (so tests and the CLI run exactly the same operator)."""
    registry = kopf.OperatorRegistry()
    state: dict[str, Reconciler] = {}
    owned = {MANAGED_BY_LABEL: FIELD_MANAGER}

    @kopf.on.startup(id="configure", registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING  # our own Events only, not one per handler run

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
        if info is not None and "reconciler" not in state:
            state["reconciler"] = Reconciler(
                KubeClient(info), autoscaler=config.autoscaler, discovery_seconds=config.discovery_seconds
            )
        return info

    @kopf.on.cleanup(id="close", registry=registry)
    async def close(**_: Any) -> None:
        if "reconciler" in state:
            await state.pop("reconciler").client.close()

    @kopf.index("apps", "v1", "deployments", labels=owned, id="shoal_deployments", registry=registry)
    def shoal_deployments(
        namespace: str, labels: Mapping[str, str], body: kopf.Body, **_: Any
    ) -> dict[tuple[str, str, str], dict[str, Any]]:
        view = {
            "metadata": {
                "generation": body["metadata"].get("generation", 0),
                "annotations": {DIGEST_ANNOTATION: body["metadata"].get("annotations", {}).get(DIGEST_ANNOTATION)},
            },
            "spec": {"replicas": body.get("spec", {}).get("replicas")},
            "status": dict(body.get("status") or {}),
        }
        return {(namespace, labels[OWNER_LABEL], labels[COMPONENT_LABEL]): view}

    @kopf.index("v1", "pods", labels={**owned, COMPONENT_LABEL: "engine"}, id="shoal_engine_pods", registry=registry)
    def shoal_engine_pods(
        namespace: str, name: str, labels: Mapping[str, str], body: kopf.Body, **_: Any
    ) -> dict[tuple[str, str], dict[str, Any]]:
        view = {"metadata": {"name": name}, "status": dict(body.get("status") or {})}
        return {(namespace, labels[OWNER_LABEL]): view}

    async def run(body: kopf.Body, patch: kopf.Patch, indices: Mapping[str, Any], trigger: Trigger) -> None:
        reconciler = state.get("reconciler")
        if reconciler is None:  # the operator is stopping: its client is closed
            return
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        deployments, pods = indices["shoal_deployments"], indices["shoal_engine_pods"]
        found = Children(
            engine=_first(deployments, (ns, name, "engine")),
            gateway=_first(deployments, (ns, name, "gateway")),
            engine_pods=list(pods.get((ns, name), ())),
        )
        await reconciler.reconcile(body, patch, found, trigger=trigger)

    @kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile", registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, field="spec", id="reconcile", registry=registry)
    async def reconcile(body: kopf.Body, patch: kopf.Patch, **indices: Any) -> None:
        await run(body, patch, indices, "change")

    @kopf.on.resume(GROUP, VERSION, PLURAL, id="resume", registry=registry)
    async def resume(body: kopf.Body, patch: kopf.Patch, **indices: Any) -> None:
        await run(body, patch, indices, "resume")

    @kopf.timer(
        GROUP, VERSION, PLURAL, interval=config.resync_seconds, initial_delay=config.resync_seconds, id="refresh",
        registry=registry,
    )
    async def refresh(body: kopf.Body, patch: kopf.Patch, **indices: Any) -> None:
        await run(body, patch, indices, "refresh")

    return registry
