"""The gateway's identity: a ServiceAccount allowed to read the engine Service's EndpointSlices, nothing more."""

from __future__ import annotations

from typing import Any

from shoal.operator.naming import Owner

COMPONENT = "gateway"


def service_account(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": owner.metadata(owner.gateway_name, COMPONENT)}


def role(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": owner.metadata(owner.gateway_name, COMPONENT),
        "rules": [
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}
        ],
    }


def role_binding(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": owner.metadata(owner.gateway_name, COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": owner.gateway_name},
        "subjects": [{"kind": "ServiceAccount", "name": owner.gateway_name, "namespace": owner.namespace}],
    }
