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

from shoal.engine_kinds import DEFAULT_BLOCK_SIZE
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

# flag -> ConfigMap key, in command-line order
_FLAGS = {
    "--kube-service": "SHOAL_GATEWAY_KUBE_SERVICE",
    "--kube-port-name": "SHOAL_GATEWAY_KUBE_PORT_NAME",
    "--policy": "SHOAL_GATEWAY_POLICY",
    "--bound-factor": "SHOAL_GATEWAY_BOUND_FACTOR",
    "--tokenizer": "SHOAL_GATEWAY_TOKENIZER",
    "--fetch-record": "SHOAL_GATEWAY_FETCH_RECORD",
    "--block-size": "SHOAL_GATEWAY_BLOCK_SIZE",
    "--engine-kind": "SHOAL_GATEWAY_ENGINE_KIND",
    "--api-keys": "SHOAL_GATEWAY_API_KEYS",
    "--redis-url": "SHOAL_GATEWAY_REDIS_URL",
    "--hold-queue-size": "SHOAL_GATEWAY_HOLD_QUEUE_SIZE",
    "--hold-seconds": "SHOAL_GATEWAY_HOLD_SECONDS",
    "--connect-timeout": "SHOAL_GATEWAY_CONNECT_TIMEOUT",
    "--first-token-timeout": "SHOAL_GATEWAY_FIRST_TOKEN_TIMEOUT",
    "--inter-token-timeout": "SHOAL_GATEWAY_INTER_TOKEN_TIMEOUT",
    "--request-timeout": "SHOAL_GATEWAY_REQUEST_TIMEOUT",
}


def gateway_settings(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, str]:
    """The ConfigMap's data: one entry per ``shoal gateway`` flag the operator sets."""
    gateway = spec.gateway
    settings = {
        "SHOAL_GATEWAY_KUBE_SERVICE": f"{owner.namespace}/{owner.engine_name}",
        "SHOAL_GATEWAY_KUBE_PORT_NAME": "http",
        "SHOAL_GATEWAY_POLICY": gateway.routing_policy,
        "SHOAL_GATEWAY_BOUND_FACTOR": f"{gateway.bound_factor:g}",
        "SHOAL_GATEWAY_BLOCK_SIZE": str(spec.engine.block_size or DEFAULT_BLOCK_SIZE),
        "SHOAL_GATEWAY_ENGINE_KIND": spec.engine.kind,
        "SHOAL_GATEWAY_HOLD_QUEUE_SIZE": str(gateway.hold_queue.size),
        "SHOAL_GATEWAY_HOLD_SECONDS": str(gateway.hold_queue.wait_seconds),
        "SHOAL_GATEWAY_CONNECT_TIMEOUT": f"{gateway.timeouts.connect_seconds:g}",
        "SHOAL_GATEWAY_FIRST_TOKEN_TIMEOUT": f"{gateway.timeouts.first_token_seconds:g}",
        "SHOAL_GATEWAY_INTER_TOKEN_TIMEOUT": f"{gateway.timeouts.inter_token_seconds:g}",
        "SHOAL_GATEWAY_REQUEST_TIMEOUT": f"{gateway.timeouts.request_seconds:g}",
        **gateway_tokenizer_settings(spec),
    }
    settings["SHOAL_GATEWAY_API_KEYS"] = f"{API_KEYS_DIR}/{api_key_secret_ref(owner, spec).key}"
    if gateway.redis_url is not None:
        settings["SHOAL_GATEWAY_REDIS_URL"] = gateway.redis_url
    return settings


def gateway_args(settings: dict[str, str]) -> list[str]:
    """``shoal gateway`` arguments referencing the ConfigMap's variables (expanded by the kubelet)."""
    args = ["gateway", "--host", "0.0.0.0", "--port", str(GATEWAY_PORT)]
    for flag, key in _FLAGS.items():
        if key in settings:
            args += [flag, f"$({key})"]
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
