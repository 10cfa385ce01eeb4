"""PodDisruptionBudgets (policy/v1) for the engine and gateway pods, so a node drain or a cluster upgrade takes
only as many of either at once as ``podDisruptionBudget`` allows (``maxUnavailable: 1`` by default).

Pods that are not ready may always be evicted (``unhealthyPodEvictionPolicy: AlwaysAllow``): a crash-looping
engine must never hold up a drain. Budgets that could block every eviction are refused at admission
(:mod:`shoal.operator.pod_fields`)."""

from __future__ import annotations

from typing import Any

from shoal.operator.naming import Owner
from shoal.operator.pod_fields import PodDisruptionBudgetSpec


def pod_disruption_budget(owner: Owner, name: str, component: str, budget: PodDisruptionBudgetSpec) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": owner.metadata(name, component),
        "spec": {
            "selector": {"matchLabels": owner.selector(component)},
            **budget.policy(),
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
