"""Pure builders: an InferenceDeployment's spec -> the Kubernetes objects that run it."""

from __future__ import annotations

from typing import Any

from shoal.operator.builders.access import role, role_binding, service_account
from shoal.operator.builders.engine import engine_deployment, engine_service, serve_args
from shoal.operator.builders.gateway import gateway_config_map, gateway_deployment, gateway_service
from shoal.operator.builders.monitoring import pod_monitor, prometheus_rule
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

__all__ = ["build_children", "serve_args"]


def build_children(
    owner: Owner, spec: InferenceDeploymentSpec, replicas: int, *, prometheus_operator: bool
) -> list[dict[str, Any]]:
    """Every child object, in apply order (identity and config before the pods that use them)."""
    children = [
        service_account(owner),
        role(owner),
        role_binding(owner),
        engine_service(owner),
        engine_deployment(owner, spec, replicas),
        gateway_config_map(owner, spec),
        gateway_deployment(owner, spec),
        gateway_service(owner),
    ]
    if prometheus_operator:
        children += [pod_monitor(owner), prometheus_rule(owner, spec)]
    return children
