"""Where pods go and what they carry besides their containers: the spec's pod fields (``nodeSelector``,
``tolerations``, ``affinity``, ``priorityClassName``, ``runtimeClassName``, ``imagePullSecrets``, ``podLabels``,
``podAnnotations``) put onto a pod template, with the operator's defaults: Linux nodes, and replicas of one
component spread across nodes, so one node's loss takes few of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from shoal.operator.pod_fields import PodFields

OS_LABEL = "kubernetes.io/os"


def core(model: BaseModel) -> dict[str, Any]:
    """A core-API-shaped model as the core API writes it: camelCase, unset and default fields left out."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)


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


def pod_placement(
    fields: PodFields, selector: dict[str, str], tolerations: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The pod spec's placement and pull fields; ``tolerations``: the operator's own, after the spec's."""
    placement: dict[str, Any] = {
        "nodeSelector": {OS_LABEL: "linux", **fields.node_selector},
        "tolerations": [core(t) for t in fields.tolerations] + (tolerations or []),
        "topologySpreadConstraints": spread_across_nodes(selector),
    }
    if fields.affinity is not None:
        placement["affinity"] = core(fields.affinity)
    if fields.priority_class_name is not None:
        placement["priorityClassName"] = fields.priority_class_name
    if fields.runtime_class_name is not None:
        placement["runtimeClassName"] = fields.runtime_class_name
    if fields.image_pull_secrets:
        placement["imagePullSecrets"] = [core(s) for s in fields.image_pull_secrets]
    return placement


def pod_metadata(fields: PodFields, labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, Any]:
    """The pod template's metadata: the operator's labels (which the spec cannot override: the Deployment selects
    by them) over ``podLabels``; ``podAnnotations`` over the operator's annotations."""
    return {
        "labels": {**fields.pod_labels, **labels},
        "annotations": {**annotations, **fields.pod_annotations},
    }


def container_env(fields: PodFields, base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``base`` (the operator's variables) then the spec's ``env``: a later entry of the same name wins."""
    return base + [core(e) for e in fields.env]
