"""Pure builders: an InferenceDeployment's spec -> the Kubernetes objects that run it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from shoal.operator.builders.access import role, role_binding, service_account
from shoal.operator.builders.adapters import adapters_config_map
from shoal.operator.builders.disruption import pod_disruption_budget
from shoal.operator.builders.engine import engine_deployment, engine_service, serve_args
from shoal.operator.builders.gateway import gateway_config_map, gateway_deployment, gateway_service
from shoal.operator.builders.monitoring import monitoring_objects
from shoal.operator.builders.network import engine_network_policy
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.operator.standby_pool import deployment_replicas

__all__ = ["DIGEST_ANNOTATION", "applied_digest", "build_children", "serve_args"]

DIGEST_ANNOTATION = "shoal.dev/children-digest"


def build_children(
    owner: Owner,
    spec: InferenceDeploymentSpec,
    replicas: int,
    *,
    prometheus_operator: bool,
    engine_images: Mapping[str, str] | None = None,
    monitoring_labels: Mapping[str, str] | None = None,
    gateway_image: str | None = None,
) -> list[dict[str, Any]]:
    """Every child object, in apply order (identity and config before the pods that use them).

    ``engine_images`` are the operator's engine image per kind (``--engine-image``), ``gateway_image`` its
    gateway image (``--gateway-image``); ``monitoring_labels`` go on the Prometheus Operator objects
    (``--monitoring-label``). ``replicas`` is the serving engine count: the engine Deployment runs the standby pool
    beside it (:mod:`..standby_pool`). The engine Deployment carries a digest of all of them (its replica count aside: that is the scale decision,
    compared on its own), so a later pass knows from the watch alone whether anything needs applying.
    """
    engine = engine_deployment(owner, spec, 0, engine_images, gateway_image)
    children = [
        service_account(owner),
        role(owner),
        role_binding(owner),
        engine_network_policy(owner, spec),
        engine_service(owner, spec),
        *adapters_config_map(owner, spec),
        engine,
        gateway_config_map(owner, spec),
        gateway_deployment(owner, spec, gateway_image),
        gateway_service(owner),
        pod_disruption_budget(owner, owner.engine_name, "engine", spec.engine.pod_disruption_budget),
        pod_disruption_budget(owner, owner.gateway_name, "gateway", spec.gateway.pod_disruption_budget),
    ]
    if prometheus_operator:
        children += monitoring_objects(owner, spec, monitoring_labels or {})
    digest = hashlib.sha256(json.dumps(children, sort_keys=True).encode()).hexdigest()[:16]
    engine["spec"]["replicas"] = deployment_replicas(spec, replicas)  # the serving engines plus the standby pool
    engine["metadata"]["annotations"] = {DIGEST_ANNOTATION: digest}
    return children


def applied_digest(deployment: Mapping[str, Any]) -> str | None:
    """The digest the engine Deployment was last applied with."""
    return (deployment.get("metadata", {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
