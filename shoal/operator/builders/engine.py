"""The engine half of an InferenceDeployment: a Deployment of engine pods (``shoal serve``, or the kind's own
server: ``shoal.engine_kinds``) and a headless Service.

The Service is headless because nothing should load-balance engines blindly: the gateway discovers each pod
through the Service's EndpointSlices and routes by prefix and load. A kind that publishes its KV cache over ZMQ
(vLLM) binds it on ``KV_EVENTS_PORT``, a second port of the pod and the Service named ``kv-events``, which the
gateway finds in the same slices and follows, and its replay socket on the next port (``kv-replay``). Probes follow the engine server's contract
(the kind's paths): Shoal's ``/ready`` only once the model is loaded (the startup probe waits for it, up to
``engine.startupSeconds``), then ``/health`` for liveness, so a slow model load is never mistaken for a hung
process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from shoal.engine_kinds import EngineSettings, adapter
from shoal.engine_kinds.vllm import KV_EVENTS_PORT, KV_EVENTS_PORT_NAME, KV_REPLAY_PORT_NAME
from shoal.operator.adapters import RUNTIME_SLOTS
from shoal.operator.builders.adapters import (
    MODULES_FILE,
    adapter_paths,
    at_run_time,
    engine_access,
    engine_adapters,
    pod_annotations,
)
from shoal.operator.builders.gateway import gateway_image
from shoal.operator.builders.kernel_cache import kernel_cache
from shoal.operator.builders.model import (
    CACHE_DIR,
    CONVERTED_WEIGHTS_DIR,
    engine_model,
    engine_model_path,
    shoal_reads_fetched,
)
from shoal.operator.builders.placement import container_env, core, pod_metadata, pod_placement
from shoal.operator.builders.security import (
    SCRATCH_ENV,
    SCRATCH_MOUNT,
    SCRATCH_VOLUME,
    container_security_context,
    pod_security_context,
)
from shoal.operator.naming import ENGINE_PORT, Owner
from shoal.operator.quantity import quantity_bytes
from shoal.operator.spec import DEFAULT_ENGINE_IMAGES, InferenceDeploymentSpec
from shoal.operator.standby_pool import POOL_LABEL, SERVING, deployment_replicas
from shoal.operator.termination import PRESTOP_SLEEP_SECONDS, Termination, termination

COMPONENT = "engine"
STARTUP_PERIOD_SECONDS = 10


def engine_settings(spec: InferenceDeploymentSpec) -> EngineSettings:
    """The spec's engine fields as the kind's adapter takes them (the model as the pod sees it)."""
    engine = spec.engine
    runtime = at_run_time(spec)
    return EngineSettings(
        model=engine_model_path(spec),
        served_name=spec.served_name,
        port=ENGINE_PORT,
        dtype=engine.dtype,
        block_size=engine.block_size,
        max_model_len=engine.max_model_len,
        max_num_seqs=engine.max_num_seqs,
        kv_cache_bytes=None if engine.kv_cache_memory is None else quantity_bytes(engine.kv_cache_memory),
        gpu_memory_utilization=engine.gpu_memory_utilization,
        enforce_eager=engine.enforce_eager,
        gpus=engine.resources.gpus,
        download_dir=CACHE_DIR if shoal_reads_fetched(spec) or runtime else None,
        kv_events_port=KV_EVENTS_PORT if publishes_zmq_events(spec) else None,
        lora_modules=adapter_paths(spec),
        lora_modules_file=MODULES_FILE if runtime else None,
        max_loras=engine.max_loras or (RUNTIME_SLOTS if runtime else None),
        max_lora_rank=engine.max_lora_rank,
        shutdown_grace_s=engine_termination(spec).drain_s,
        weights_cache_dir=converted_weights_dir(spec),
    )


def converted_weights_dir(spec: InferenceDeploymentSpec) -> str | None:
    """Where a Shoal engine keeps its converted weights: beside the model in ``spec.model.cache`` (a node's
    directory or a claim, which outlives the pod), so the next engine there maps them instead of converting; an
    engine whose cache is its pod's own emptyDir would never start again to read them."""
    if spec.model.cache is None or spec.engine.kind != "shoal":
        return None
    return CONVERTED_WEIGHTS_DIR


def publishes_zmq_events(spec: InferenceDeploymentSpec) -> bool:
    """The kind publishes its KV cache on a ZMQ port of its own (vLLM), which the gateway follows."""
    return adapter(spec.engine.kind).kv_events == "zmq"


def engine_ports(spec: InferenceDeploymentSpec) -> list[dict[str, Any]]:
    """The container's ports: the API, and the KV-event publisher's and its replay socket's where the kind has them."""
    ports = [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}]
    if publishes_zmq_events(spec):
        ports.append({"name": KV_EVENTS_PORT_NAME, "containerPort": KV_EVENTS_PORT, "protocol": "TCP"})
        ports.append({"name": KV_REPLAY_PORT_NAME, "containerPort": KV_EVENTS_PORT + 1, "protocol": "TCP"})
    return ports


def engine_termination(spec: InferenceDeploymentSpec) -> Termination:
    """The pod's grace period and the engine's drain (``shoal.operator.termination``): the spec's override, else
    sized from ``maxModelLen`` and the device's time per output token."""
    engine = spec.engine
    return termination(engine.max_model_len, None, engine.resources.gpus, engine.termination_grace_period_seconds)


def engine_argv(spec: InferenceDeploymentSpec) -> list[str]:
    """The engine's whole command line (its binary first), ``extraArgs`` appended."""
    return adapter(spec.engine.kind).command(engine_settings(spec)) + list(spec.engine.extra_args)


def serve_args(spec: InferenceDeploymentSpec) -> list[str]:
    """The ``shoal serve`` command line for one Shoal engine (``shoal`` itself left out)."""
    return engine_argv(spec)[1:]


def engine_image(spec: InferenceDeploymentSpec, images: Mapping[str, str]) -> str:
    """``spec.engine.image``, else the operator's image for the kind (``--engine-image``), else the kind's default
    for the pod's device."""
    kind = spec.engine.kind
    gpu, cpu = DEFAULT_ENGINE_IMAGES[kind]
    return spec.engine.image or images.get(kind) or (gpu if spec.engine.resources.gpus else cpu)


def _tolerations(spec: InferenceDeploymentSpec) -> list[dict[str, Any]]:
    """The operator's own: a GPU pod tolerates the taint named after its GPU resource, unless the spec does."""
    gpu = spec.engine.resources.gpu_resource_name
    if spec.engine.resources.gpus and not any(t.key == gpu for t in spec.engine.tolerations):
        return [{"key": gpu, "operator": "Exists", "effect": "NoSchedule"}]
    return []


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def engine_container(
    spec: InferenceDeploymentSpec, model_mounts: list[dict[str, Any]], images: Mapping[str, str]
) -> dict[str, Any]:
    engine = spec.engine
    kind = adapter(engine.kind)
    argv = engine_argv(spec)
    _, kernel_mounts, kernel_env = kernel_cache(engine)
    store_env, store_secret = engine_access(spec)
    env_from = [core(e) for e in engine.env_from] + store_secret
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": engine_image(spec, images),
        "imagePullPolicy": engine.image_pull_policy,
        "command": [kind.image_binary or argv[0]],
        "args": argv[1:],
        "ports": engine_ports(spec),
        "env": container_env(engine, SCRATCH_ENV + kernel_env) + store_env,
        **({"envFrom": env_from} if env_from else {}),
        "resources": engine.resources.container(),
        "terminationMessagePolicy": "FallbackToLogsOnError",  # a crash's last log lines reach the status
        "startupProbe": _probe(
            kind.ready_path, STARTUP_PERIOD_SECONDS, math.ceil(engine.startup_seconds / STARTUP_PERIOD_SECONDS)
        ),
        "livenessProbe": _probe(kind.live_path, 10, 3),
        "readinessProbe": _probe(kind.ready_path, 5, 2),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}},
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, SCRATCH_MOUNT, *model_mounts, *kernel_mounts],
    }
    return container


def engine_deployment(
    owner: Owner,
    spec: InferenceDeploymentSpec,
    replicas: int,
    images: Mapping[str, str] | None = None,
    default_gateway_image: str | None = None,
) -> dict[str, Any]:
    """The engine Deployment, at ``replicas`` serving engines (decided by the spec or the autoscaler, never here)
    plus the standby pool; its pods start serving (:mod:`..standby_pool` moves them); ``images``:
    the operator's engine image per kind; another kind's model is fetched by the gateway's image."""
    images = images or {}
    fetcher_images = (engine_image(spec, images), gateway_image(spec, default_gateway_image))
    init_containers, model_volumes, model_mounts = engine_model(spec, *fetcher_images)
    adapter_inits, adapter_volumes, adapter_mounts = engine_adapters(
        owner, spec, fetcher_images, model_volumes, model_mounts
    )
    init_containers, model_volumes = init_containers + adapter_inits, model_volumes + adapter_volumes
    model_mounts = model_mounts + adapter_mounts
    kernel_volumes, _, _ = kernel_cache(spec.engine)
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        SCRATCH_VOLUME,
        *model_volumes,
        *kernel_volumes,
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owner.metadata(owner.engine_name, COMPONENT),
        "spec": {
            "replicas": deployment_replicas(spec, replicas),
            "selector": {"matchLabels": owner.selector(COMPONENT)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": pod_metadata(
                    spec.engine,
                    {**owner.labels(COMPONENT), POOL_LABEL: SERVING},
                    {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(ENGINE_PORT),
                        "prometheus.io/path": "/metrics",
                        **pod_annotations(spec),
                    },
                ),
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": pod_security_context(),
                    "terminationGracePeriodSeconds": engine_termination(spec).grace_s,
                    **({"initContainers": init_containers} if init_containers else {}),
                    "containers": [engine_container(spec, model_mounts, images)],
                    "volumes": volumes,
                    **pod_placement(spec.engine, owner.selector(COMPONENT), _tolerations(spec)),
                },
            },
        },
    }


def engine_service(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, Any]:
    """Headless: its EndpointSlices list each ready serving engine pod (and its KV-event port) for the gateway; a
    standby pool pod is no endpoint (:mod:`..standby_pool`)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owner.metadata(owner.engine_name, COMPONENT),
        "spec": {
            "clusterIP": "None",
            "selector": {**owner.selector(COMPONENT), POOL_LABEL: SERVING},
            "ports": [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
                for p in engine_ports(spec)
            ],
        },
    }
