"""The gateway half: a Deployment of ``shoal gateway`` pods, its Service and ConfigMap.

The gateway finds engines by watching the EndpointSlices of the engine Service (read access granted by
:mod:`.access`), so scaling the engines needs no gateway restart. Its settings live in the ConfigMap as
environment variables that the container's arguments reference (``$(SHOAL_GATEWAY_POLICY)``), so
``kubectl get configmap`` shows what the gateway runs with; a hash of them on the pod template rolls the pods
when a setting changes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shoal.engine_kinds import adapter
from shoal.operator.builders.api_keys import api_key_secret_ref
from shoal.operator.builders.model import gateway_model, gateway_tokenizer_settings
from shoal.operator.builders.placement import container_env, core, pod_metadata, pod_placement
from shoal.operator.builders.security import (
    SCRATCH_ENV,
    SCRATCH_MOUNT,
    SCRATCH_VOLUME,
    container_security_context,
    pod_security_context,
)
from shoal.operator.naming import GATEWAY_PORT, Owner
from shoal.operator.spec import DEFAULT_GATEWAY_IMAGE, InferenceDeploymentSpec

COMPONENT = "gateway"
API_KEYS_DIR = "/etc/shoal/api-keys"

# the flags the operator sets, in command-line order
_ARG_ORDER = (
    "--kube-service",
    "--kube-port-name",
    "--policy",
    "--bound-factor",
    "--tokenizer",
    "--fetch-record",
    "--block-size",
    "--engine-kind",
    "--api-keys",
    "--redis-url",
    "--hold-queue-size",
    "--hold-seconds",
    "--connect-timeout",
    "--first-token-timeout",
    "--inter-token-timeout",
    "--request-timeout",
)


def gateway_flags(spec: InferenceDeploymentSpec) -> dict[str, str]:
    """The ``shoal gateway`` flags the spec alone decides, by flag: the one source for the operator's ConfigMap
    and ``shoal up``'s command line; each adds only where it finds the engines, the tokenizer and the keys."""
    gateway, timeouts = spec.gateway, spec.gateway.timeouts
    flags = {
        "--policy": gateway.routing_policy,
        "--bound-factor": f"{gateway.bound_factor:g}",
        "--block-size": str(adapter(spec.engine.kind).block_size(spec.engine.block_size, spec.engine.resources.gpus)),
        "--engine-kind": spec.engine.kind,
        "--hold-queue-size": str(gateway.hold_queue.size),
        "--hold-seconds": str(gateway.hold_queue.wait_seconds),
        "--connect-timeout": f"{timeouts.connect_seconds:g}",
        "--first-token-timeout": f"{timeouts.first_token_seconds:g}",
        "--inter-token-timeout": f"{timeouts.inter_token_seconds:g}",
        "--request-timeout": f"{timeouts.request_seconds:g}",
    }
    if gateway.redis_url is not None:
        flags["--redis-url"] = gateway.redis_url
    return flags


def env_key(flag: str) -> str:
    """The ConfigMap key holding a flag's value: ``--bound-factor`` is ``SHOAL_GATEWAY_BOUND_FACTOR``."""
    return "SHOAL_GATEWAY_" + flag.removeprefix("--").replace("-", "_").upper()


def gateway_settings(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, str]:
    """The ConfigMap's data: one entry per ``shoal gateway`` flag the operator sets."""
    flags = {
        "--kube-service": f"{owner.namespace}/{owner.engine_name}",
        "--kube-port-name": "http",
        "--api-keys": f"{API_KEYS_DIR}/{api_key_secret_ref(owner, spec).key}",
        **gateway_flags(spec),
    }
    return {**{env_key(flag): value for flag, value in flags.items()}, **gateway_tokenizer_settings(spec)}


def gateway_args(settings: dict[str, str]) -> list[str]:
    """``shoal gateway`` arguments referencing the ConfigMap's variables (expanded by the kubelet)."""
    args = ["gateway", "--host", "0.0.0.0", "--port", str(GATEWAY_PORT)]
    for flag in _ARG_ORDER:
        if env_key(flag) in settings:
            args += [flag, f"$({env_key(flag)})"]
    return args


def gateway_config_map(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owner.metadata(owner.gateway_name, COMPONENT),
        "data": gateway_settings(owner, spec),
    }


def gateway_image(spec: InferenceDeploymentSpec, default: str | None) -> str:
    """``spec.gateway.image``, else the operator's (``--gateway-image``), else the release's own image."""
    return spec.gateway.image or default or DEFAULT_GATEWAY_IMAGE


def gateway_deployment(owner: Owner, spec: InferenceDeploymentSpec, default_image: str | None = None) -> dict[str, Any]:
    """The gateway Deployment; ``default_image``: the operator's gateway image, for a spec that names none."""
    gateway = spec.gateway
    image = gateway_image(spec, default_image)
    settings = gateway_settings(owner, spec)
    config_hash = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    probe = {"periodSeconds": 5, "timeoutSeconds": 3}
    volumes: list[dict[str, Any]] = [
        SCRATCH_VOLUME,
        {"name": "api-keys", "secret": {"secretName": api_key_secret_ref(owner, spec).name}},
    ]
    mounts: list[dict[str, Any]] = [SCRATCH_MOUNT, {"name": "api-keys", "mountPath": API_KEYS_DIR, "readOnly": True}]
    init_containers, model_volumes, model_mounts = gateway_model(spec, image)  # the model's own tokenizer, not weights
    volumes += model_volumes
    mounts += model_mounts
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owner.metadata(owner.gateway_name, COMPONENT),
        "spec": {
            "replicas": gateway.replicas,
            "selector": {"matchLabels": owner.selector(COMPONENT)},
            "template": {
                "metadata": pod_metadata(
                    gateway,
                    owner.labels(COMPONENT),
                    {
                        "shoal.dev/config-hash": config_hash,
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(GATEWAY_PORT),
                        "prometheus.io/path": "/metrics",
                    },
                ),
                "spec": {
                    "serviceAccountName": owner.gateway_name,
                    "securityContext": pod_security_context(),
                    "terminationGracePeriodSeconds": 30,
                    **({"initContainers": init_containers} if init_containers else {}),
                    "containers": [
                        {
                            "name": COMPONENT,
                            "image": image,
                            "command": ["shoal"],
                            "args": gateway_args(settings),
                            "env": container_env(gateway, SCRATCH_ENV),
                            "envFrom": [
                                {"configMapRef": {"name": owner.gateway_name}},
                                *(core(e) for e in gateway.env_from),
                            ],
                            "resources": core(gateway.resources),
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "ports": [{"name": "http", "containerPort": GATEWAY_PORT, "protocol": "TCP"}],
                            "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, **probe},
                            "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, **probe},
                            "securityContext": container_security_context(),
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": volumes,
                    **pod_placement(gateway, owner.selector(COMPONENT)),
                },
            },
        },
    }


def gateway_service(owner: Owner) -> dict[str, Any]:
    """The fleet's address for clients: ``http://<name>.<namespace>.svc/v1``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owner.metadata(owner.gateway_service_name, COMPONENT),
        "spec": {
            "type": "ClusterIP",
            "selector": owner.selector(COMPONENT),
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }
