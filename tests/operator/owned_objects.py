"""What the fault tests check once the operator has converged again: every child exists exactly once, owned by
its InferenceDeployment, nothing the operator made is left without an owner, and kopf's per-handler progress
annotations are gone (a handler that never finished must not wedge the object)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from support.kube_testbed import ControlPlane

from shoal.operator.naming import FIELD_MANAGER, MANAGED_BY_LABEL
from shoal.operator.spec import GROUP

KINDS = (
    "deployments,services,configmaps,serviceaccounts,roles,rolebindings,networkpolicies,poddisruptionbudgets,secrets"
)
# what one InferenceDeployment owns (without the Prometheus Operator): as in operator_harness.children_of
EXPECTED = Counter(
    {
        "Deployment": 2,
        "Service": 2,
        "ConfigMap": 1,
        "ServiceAccount": 1,
        "Role": 1,
        "RoleBinding": 1,
        "NetworkPolicy": 1,
        "PodDisruptionBudget": 2,
        "Secret": 1,
    }
)
# kopf's own markers, not progress: the spec last handled, and that kopf has seen the object
KOPF_MARKERS = {f"{GROUP}/last-handled-configuration", f"{GROUP}/kopf-managed"}


def _items(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    out = plane.kubectl("get", KINDS, "-n", namespace, "-o", "json").stdout
    return list(json.loads(out)["items"])


def owned_counts(plane: ControlPlane, namespace: str, uid: str) -> Counter[str]:
    """How many objects of each kind the InferenceDeployment ``uid`` owns (a duplicate would count twice)."""
    return Counter(
        item["kind"]
        for item in _items(plane, namespace)
        if any(ref.get("uid") == uid for ref in item["metadata"].get("ownerReferences", []))
    )


def orphans(plane: ControlPlane, namespace: str, uids: set[str]) -> list[str]:
    """``kind/name`` of what the operator labelled as its own but no live InferenceDeployment owns."""
    return [
        f"{item['kind']}/{item['metadata']['name']}"
        for item in _items(plane, namespace)
        if (item["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == FIELD_MANAGER
        and not any(ref.get("uid") in uids for ref in item["metadata"].get("ownerReferences", []))
    ]


def stale_progress(infd: dict[str, Any]) -> dict[str, str]:
    """kopf's progress annotations still on the object (a handler recorded as started, retrying or failed)."""
    annotations = infd["metadata"].get("annotations") or {}
    return {key: value for key, value in annotations.items() if key.startswith(f"{GROUP}/") and key not in KOPF_MARKERS}
