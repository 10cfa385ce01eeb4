"""kopf wiring: thin handlers that gather what kopf knows and hand it to the :class:`.Reconciler`.

What the handlers share (the reconciler with its apiserver client, kopf's live index views, the Alertmanager
receiver) is an :class:`OperatorState` in kopf's ``memo``, created by a startup handler and closed by a cleanup
handler, so one registry can run any number of times (the CLI, each test's ``KopfRunner``) without leaking state.
Two kopf indices follow the children through watches (the operator's Deployments, and the engine pods), so a
status refresh reads memory, not the apiserver. Spec changes (create, update, the scale subresource) apply every
child; operator restarts (resume) and a timer every ``resync`` seconds refresh the status from the indices and
re-apply only what drifted (with autoscaling on, that timer is also the autoscaler's evaluation period). The
Alertmanager receiver and the metrics page (:mod:`.metrics`), when configured, run in the same event loop; the
receiver calls :func:`evaluate_alert`'s pass.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import kopf
from aiohttp import web

from shoal.operator import alert_receiver
from shoal.operator.autoscaler import FleetAutoscaler
from shoal.operator.builders import DIGEST_ANNOTATION
from shoal.operator.builders.adapters import ANNOTATION as ADAPTERS_ANNOTATION
from shoal.operator.crd_upgrade import upgrade_crd
from shoal.operator.kube import KubeClient, KubeError
from shoal.operator.metrics import serve_metrics
from shoal.operator.naming import COMPONENT_LABEL, FIELD_MANAGER, MANAGED_BY_LABEL, OWNER_LABEL
from shoal.operator.reconciler import Children, Reconciler, Trigger
from shoal.operator.spec import GROUP, KIND, PLURAL, VERSION
from shoal.operator.standby_pool import POOL_LABEL
from shoal.protocol.backoff import Backoff

ANNOTATION_PREFIX = GROUP
OWNED = {MANAGED_BY_LABEL: FIELD_MANAGER}
UNREACHABLE_RETRY = Backoff(initial_s=1.0, cap_s=30.0)  # passes while the apiserver cannot be reached
APISERVER_NOT_SERVING = frozenset({429, 500, 502, 503, 504})  # answers of an apiserver that is up but not serving


@dataclass(frozen=True)
class AlertsConfig:
    """Where the Alertmanager receiver listens, and its bearer token (read per request)."""

    port: int
    token: Callable[[], str]
    host: str = "0.0.0.0"


@dataclass(frozen=True)
class OperatorConfig:
    resync_seconds: float = 10.0
    discovery_seconds: float = 60.0
    autoscaler: FleetAutoscaler | None = None
    alerts: AlertsConfig | None = None
    engine_images: Mapping[str, str] = field(default_factory=dict)  # the image per engine kind (--engine-image)
    monitoring_labels: Mapping[str, str] = field(default_factory=dict)  # on PodMonitors, rules (--monitoring-label)
    metrics_port: int = 0  # serve /metrics on this port; 0: not served (--metrics-port)
    metrics_host: str = "0.0.0.0"
    gateway_image: str | None = None  # the gateway image where a spec names none (--gateway-image)
    manage_crd: bool = False  # bring an older InferenceDeployment CRD up to this version at start-up (--manage-crd)


@dataclass
class OperatorState:
    """The handlers' shared state, kept in kopf's memo as ``memo.shoal`` (each object's memo is a shallow copy of
    the operator's, so they all hold this one instance)."""

    config: OperatorConfig
    reconciler: Reconciler
    indices: Mapping[str, Any] | None = None  # kopf's live index views, once a pass has seen them
    last_pass: float = float("-inf")  # monotonic time of the last pass: a paused (peering) replica has none
    alerts: web.AppRunner | None = None
    metrics_page: web.AppRunner | None = None
    stopping: bool = False  # the client is closed: passes return at once


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    """All handlers, registered into a fresh registry (so tests and the CLI run exactly the same operator)."""
    registry = kopf.OperatorRegistry()
    _register_lifecycle(registry, config)
    _register_indices(registry)
    _register_reconcile(registry, config)
    return registry


def credentials(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo | None:
    """The ServiceAccount in a pod, else the kubeconfig: kopf's watches and our own client use the same."""
    return kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)


def _register_lifecycle(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Login, startup (settings, shared state, the CRD with --manage-crd, the alert receiver) and cleanup."""
    kopf.on.login(id="login", registry=registry)(credentials)

    @kopf.on.startup(id="configure", registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING  # our own Events only, not one per handler run

    @kopf.on.startup(id="state", registry=registry)
    def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        info = credentials(settings)
        if info is None:
            raise kopf.PermanentError("no Kubernetes credentials: neither a ServiceAccount nor a kubeconfig")
        reconciler = Reconciler(
            KubeClient(info),
            autoscaler=config.autoscaler,
            discovery_seconds=config.discovery_seconds,
            engine_images=config.engine_images,
            monitoring_labels=config.monitoring_labels,
            gateway_image=config.gateway_image,
        )
        memo.shoal = OperatorState(config, reconciler)

    @kopf.on.startup(id="crd", registry=registry)
    async def manage_crd(memo: kopf.Memo, **_: Any) -> None:
        if not config.manage_crd:
            return
        log = logging.getLogger(__name__)
        try:
            decision = await upgrade_crd(memo.shoal.reconciler.client)
        except (KubeError, httpx.HTTPError) as error:  # the operator still serves the CRD it finds
            log.warning("could not update the InferenceDeployment CRD: %s", error)
            return
        log.info("%s", decision.reason)

    @kopf.on.startup(id="metrics", registry=registry)
    async def start_metrics(memo: kopf.Memo, **_: Any) -> None:
        if not config.metrics_port:
            return
        state: OperatorState = memo.shoal
        state.metrics_page = await serve_metrics(state.reconciler.metrics, config.metrics_host, config.metrics_port)
        logging.getLogger(__name__).info("metrics on %s:%d/metrics", config.metrics_host, config.metrics_port)

    @kopf.on.startup(id="alerts", registry=registry)
    async def start_alerts(memo: kopf.Memo, **_: Any) -> None:
        if config.alerts is None or config.autoscaler is None:
            return
        state: OperatorState = memo.shoal
        receiver = alert_receiver.AlertReceiver(
            config.alerts.token,
            config.autoscaler,
            functools.partial(evaluate_alert, state),
            state.reconciler.metrics.alert_webhook,
        )
        state.alerts = await alert_receiver.serve(receiver, config.alerts.host, config.alerts.port)
        logging.getLogger(__name__).info(
            "Alertmanager receiver on %s:%d/alerts", config.alerts.host, config.alerts.port
        )

    @kopf.on.cleanup(id="close", registry=registry)
    async def close(memo: kopf.Memo, **_: Any) -> None:
        state: OperatorState | None = memo.get("shoal")
        if state is None:
            return
        for runner in (state.alerts, state.metrics_page):
            if runner is not None:
                await runner.cleanup()
        state.stopping = True
        await state.reconciler.adapters.close()
        await state.reconciler.client.close()


def _first(index: kopf.Index[Any, Any], key: tuple[str, ...]) -> Mapping[str, Any] | None:
    return next(iter(index.get(key, ())), None)


def _children(indices: Mapping[str, Any], namespace: str, name: str) -> Children:
    deployments, pods = indices["shoal_deployments"], indices["shoal_engine_pods"]
    return Children(
        engine=_first(deployments, (namespace, name, "engine")),
        gateway=_first(deployments, (namespace, name, "gateway")),
        engine_pods=list(pods.get((namespace, name), ())),
    )


def _replicas_managers(body: Mapping[str, Any]) -> list[str]:
    """Who owns a Deployment's ``spec.replicas`` (its managedFields): the writer named in a Warning."""
    return sorted(
        {
            entry.get("manager", "?")
            for entry in body["metadata"].get("managedFields") or []
            if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        }
    )


def _register_indices(registry: kopf.OperatorRegistry) -> None:
    """The watches' memory: the operator's Deployments, the InferenceDeployments, and the engine pods."""

    @kopf.index("apps", "v1", "deployments", labels=OWNED, id="shoal_deployments", registry=registry)  # type: ignore[arg-type]  # kopf types namespace Optional (for cluster-scoped objects); these are namespaced
    def shoal_deployments(
        namespace: str, labels: Mapping[str, str], body: kopf.Body, **_: Any
    ) -> dict[tuple[str, str, str], dict[str, Any]]:
        view = {
            "metadata": {
                "generation": body["metadata"].get("generation", 0),
                "annotations": {DIGEST_ANNOTATION: body["metadata"].get("annotations", {}).get(DIGEST_ANNOTATION)},
                "replicasManagers": _replicas_managers(body),
            },
            "spec": {"replicas": body.get("spec", {}).get("replicas")},
            "status": dict(body.get("status") or {}),
        }
        return {(namespace, labels[OWNER_LABEL], labels[COMPONENT_LABEL]): view}

    @kopf.index(GROUP, VERSION, PLURAL, id="shoal_fleets", registry=registry)  # type: ignore[arg-type]  # kopf types namespace Optional (for cluster-scoped objects); these are namespaced
    def shoal_fleets(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
        """The InferenceDeployments themselves, for the alert pass (which runs outside kopf's handlers)."""
        return {
            (namespace, name): {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "metadata": dict(body["metadata"]),
                "spec": dict(body.get("spec") or {}),
                "status": dict(body.get("status") or {}),
            }
        }

    @kopf.index("v1", "pods", labels={**OWNED, COMPONENT_LABEL: "engine"}, id="shoal_engine_pods", registry=registry)  # type: ignore[arg-type]  # kopf types namespace Optional (for cluster-scoped objects); these are namespaced
    def shoal_engine_pods(
        namespace: str, name: str, labels: Mapping[str, str], body: kopf.Body, **_: Any
    ) -> dict[tuple[str, str], dict[str, Any]]:
        meta = body["metadata"]
        view = {
            "metadata": {
                "name": name,
                "creationTimestamp": meta.get("creationTimestamp"),
                "deletionTimestamp": meta.get("deletionTimestamp"),
                "labels": {k: v for k, v in labels.items() if k == POOL_LABEL},
                "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k == ADAPTERS_ANNOTATION},
            },
            "status": dict(body.get("status") or {}),
        }
        return {(namespace, labels[OWNER_LABEL]): view}


def _register_reconcile(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """The passes over an InferenceDeployment: on a spec change, on resume, on each refresh; and its deletion."""

    @kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile", registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, field="spec", id="reconcile", registry=registry)
    async def reconcile(
        body: kopf.Body,
        patch: kopf.Patch,
        memo: kopf.Memo,
        old: Mapping[str, Any] | None = None,
        retry: int = 0,
        **indices: Any,
    ) -> None:
        await run(memo.shoal, body, patch, indices, "change", old, retry=retry)

    @kopf.on.resume(GROUP, VERSION, PLURAL, id="resume", registry=registry)
    async def resume(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int = 0, **indices: Any) -> None:
        await run(memo.shoal, body, patch, indices, "resume", retry=retry)

    @kopf.timer(
        GROUP,
        VERSION,
        PLURAL,
        interval=config.resync_seconds,
        initial_delay=config.resync_seconds,
        id="refresh",
        registry=registry,
    )
    async def refresh(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **indices: Any) -> None:
        await run(memo.shoal, body, patch, indices, "refresh")

    @kopf.on.delete(GROUP, VERSION, PLURAL, id="forget", optional=True, registry=registry)  # type: ignore[arg-type]  # kopf types namespace Optional (for cluster-scoped objects); these are namespaced
    def forget(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
        """A deleted InferenceDeployment leaves no policy, alert or lock behind."""
        if config.autoscaler is not None:
            config.autoscaler.forget((namespace, name))
        memo.shoal.reconciler.forget(namespace, name)


async def run(
    state: OperatorState,
    body: kopf.Body,
    patch: kopf.Patch,
    indices: Mapping[str, Any],
    trigger: Trigger,
    old: Mapping[str, Any] | None = None,
    retry: int = 0,
) -> None:
    """One kopf-driven pass; it also keeps the live index views and the time of the last pass for the alert pass.

    An apiserver that cannot be reached (restarting, a network cut), or that answers but cannot serve yet (a 503
    while it installs its paths after a restart, a 429 or another 5xx), fails the pass with a retry 1, 2, 4 ... 30 s
    later: kopf would retry any other exception after 60 s, a minute's delay of a change after a blip of seconds."""
    if state.stopping:
        return
    state.indices = indices
    state.last_pass = time.monotonic()
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        await state.reconciler.reconcile(body, patch, _children(indices, ns, name), trigger=trigger, old_spec=old)
    except (httpx.TransportError, KubeError) as error:
        why = apiserver_unavailable(error)
        if why is None:
            raise
        raise kopf.TemporaryError(why, delay=UNREACHABLE_RETRY.base(retry + 1)) from error


def apiserver_unavailable(error: Exception) -> str | None:
    """Why a pass failed for want of an apiserver (retried within seconds), or None for any other failure."""
    if isinstance(error, httpx.TransportError):
        return f"the apiserver could not be reached ({error!r})"
    if isinstance(error, KubeError) and error.status in APISERVER_NOT_SERVING:
        return f"the apiserver could not serve the pass yet ({error})"
    return None


async def evaluate_alert(state: OperatorState, namespace: str, name: str) -> float | None:
    """An alert's pass over one InferenceDeployment, outside kopf's handlers: take it from the index, reconcile with
    ``trigger="alert"`` (only the engine count is written), patch its status, post its Events. Returns the
    ``perf_counter()`` once the count was written, None when the object does not exist."""
    indices, reconciler = state.indices, state.reconciler
    if indices is None or state.stopping:
        raise RuntimeError("the operator is not watching (not started yet, or stopping)")
    if time.monotonic() - state.last_pass > 3 * state.config.resync_seconds + 5:
        # a replica paused by kopf peering runs no timers: only the active one writes (a 5xx: retried)
        raise RuntimeError("this operator replica is not the active one (kopf peering)")
    raw = _first(indices["shoal_fleets"], (namespace, name))  # the watch's copy: no read, no extra RBAC
    if raw is None:
        return None
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    body, patch = kopf.Body(cast(kopf.RawBody, raw)), kopf.Patch()  # the index keeps the object as kopf gave it
    events: list[dict[str, str]] = []
    await reconciler.reconcile(
        body,
        patch,
        _children(indices, namespace, name),
        trigger="alert",
        announce=lambda _, **event: events.append(event),
    )
    written = time.perf_counter()
    if patch.get("status"):
        await reconciler.client.patch_status(path, patch["status"])
    for event in events:
        await reconciler.client.event(raw, **event)
    return written
