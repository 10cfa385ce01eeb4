"""Generates the InferenceDeployment CustomResourceDefinition from the typed models in :mod:`.spec`.

Pydantic emits JSON Schema (2020-12); the apiserver wants a *structural* OpenAPI v3 schema: every node typed,
no ``$ref``, no ``anyOf`` with ``null``, ``exclusiveMinimum`` as a boolean beside ``minimum``, no
``additionalProperties: false`` next to ``properties``. :func:`structural` rewrites one into the other; the rest
of this module adds what the models cannot say (printer columns, subresources, names). ``shoal crd --write``
(or ``make crds``) writes the result into the repository (:mod:`.generated`); a test fails when it is stale.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from shoal import __version__
from shoal.operator.spec import (
    CATEGORIES,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    InferenceDeploymentSpec,
    InferenceDeploymentStatus,
)

CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILENAME = f"{GROUP}_{PLURAL}.yaml"
# The release that generated a CRD: the operator's --manage-crd updates an installed CRD only when it is older
# (shoal/operator/crd_upgrade.py).
VERSION_ANNOTATION = f"{GROUP}/crd-version"
_DROPPED_KEYS = {"title", "additionalProperties", "$defs"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Model",
        "type": "string",
        "jsonPath": ".status.servedName",
        "description": "The model name clients use (spec.model.servedName, else the source).",
    },
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas", "description": "Engines ready."},
    {
        "name": "Desired",
        "type": "integer",
        "jsonPath": ".status.desiredReplicas",
        "description": "Engines wanted now (the spec's count or the autoscaler's).",
    },
    {
        "name": "Queue",
        "type": "number",
        "jsonPath": ".status.queueDepth",
        "description": "Requests waiting in the engines' queues, as the autoscaler last read them.",
    },
    {
        "name": "TTFT-P95-Seconds",
        "type": "number",
        "jsonPath": ".status.ttftP95Seconds",
        "description": "P95 time to first token across the engines, in seconds.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

SCALE_SUBRESOURCE = {
    "specReplicasPath": ".spec.replicas.count",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def structural(node: Any, defs: dict[str, Any]) -> Any:
    """Rewrite a pydantic JSON Schema node into a Kubernetes structural schema node."""
    if isinstance(node, list):
        return [structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = structural(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        extra = {k: structural(v, defs) for k, v in node.items() if k != "$ref"}
        return {**target, **extra}
    if node.get("x-kubernetes-int-or-string"):
        return {k: v for k, v in node.items() if k not in ("anyOf", "title")}
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']!r} structurally")
        merged = {**branches[0], **{k: v for k, v in node.items() if k != "anyOf"}}
        if merged.get("default", 0) is None:
            del merged["default"]
        return structural(merged, defs)
    if "patternProperties" in node:  # pydantic's form of a map whose keys have a pattern
        ((pattern, values),) = node["patternProperties"].items()
        names = {**node.get("propertyNames", {}), "pattern": pattern}
        rest = {k: v for k, v in node.items() if k not in ("patternProperties", "propertyNames")}
        node = {**rest, "additionalProperties": values, "propertyNames": names}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS and not (key == "additionalProperties" and isinstance(value, dict)):
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "propertyNames":
            rules = out.setdefault("x-kubernetes-validations", [])
            rules.insert(0, _key_rule(value))
        elif key == "x-kubernetes-validations":
            out[key] = [*out.get(key, []), *value]
        elif key == "description":
            out[key] = plain_text(value)
        elif key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        else:
            out[key] = structural(value, defs)
    return out


def plain_text(description: str) -> str:
    """A docstring as ``kubectl explain`` should show it: one paragraph, no reStructuredText backticks."""
    return " ".join(description.replace("``", "").split())


def _key_rule(names: dict[str, Any]) -> dict[str, str]:
    """A map's key schema (pydantic's ``propertyNames``, which a structural schema lacks) as a CEL rule."""
    pattern = names["pattern"].replace("\\", "\\\\")
    return {
        "rule": f"self.all(k, size(k) <= {names['maxLength']} && k.matches('{pattern}'))",
        "message": f"every key must be {names['description']}",
    }


def model_schema(model: type[BaseModel], *, with_defaults: bool = True) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = structural(raw, raw.get("$defs", {}))
    if not with_defaults:
        schema = _without_defaults(schema)
    return schema


def _without_defaults(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_without_defaults(v) for v in node]
    return node


def _with_section_defaults(schema: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Give each optional section (a nested model with a default) its default object, recursively.

    Pydantic's ``default_factory`` leaves no default in the JSON Schema. The default must be the whole
    section, not ``{}``: the apiserver checks each default against the section's CEL rules.
    """
    for name, info in model.model_fields.items():
        sub_model = info.annotation
        if not (isinstance(sub_model, type) and issubclass(sub_model, BaseModel)):
            continue
        sub_schema = schema["properties"][info.alias or name]
        _with_section_defaults(sub_schema, sub_model)
        if info.default_factory is not None:
            sub_schema["default"] = info.get_default(call_default_factory=True).model_dump(
                by_alias=True, exclude_none=True
            )
    return schema


def build_crd() -> dict[str, Any]:
    """The full CustomResourceDefinition object."""
    spec_schema = _with_section_defaults(model_schema(InferenceDeploymentSpec), InferenceDeploymentSpec)
    status_schema = model_schema(InferenceDeploymentStatus, with_defaults=False)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "shoal"},
            "annotations": {VERSION_ANNOTATION: __version__},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": dict(SCALE_SUBRESOURCE)},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A fleet of Shoal inference engines behind a routing gateway.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def render_crd() -> str:
    header = "# Generated from shoal/operator/spec.py by `shoal crd --write`; do not edit by hand.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)
