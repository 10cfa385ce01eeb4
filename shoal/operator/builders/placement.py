"""Where pods go: replicas of one component spread across nodes, so one node's loss takes few of them."""

from __future__ import annotations

from typing import Any


def spread_across_nodes(selector: dict[str, str]) -> list[dict[str, Any]]:
    """Prefer (never require: GPUs may be scarce) one replica per node."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
    ]
