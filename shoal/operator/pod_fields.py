"""What an InferenceDeployment says about its engine and gateway pods beyond the server itself: placement
(``nodeSelector``, ``tolerations``, ``affinity``, ``priorityClassName``, ``runtimeClassName``), pulling
(``imagePullSecrets``), metadata (``podLabels``, ``podAnnotations``), environment (``env``, ``envFrom``) and the
PodDisruptionBudget. ``spec.engine`` and ``spec.gateway`` both take these, under the core API's names.

A disruption budget that can never allow an eviction (``minAvailable`` at or above the replica count,
``maxUnavailable`` 0) would make every node drain hang; it is refused at admission (:func:`blocking_rules`)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator
from pydantic.json_schema import JsonValue

from shoal.operator.core_api import (
    Affinity,
    EnvFromSource,
    EnvVar,
    LabelKey,
    LabelValue,
    LocalObjectReference,
    ObjectName,
    Toleration,
)
from shoal.operator.wire import Wire, cel

PERCENT = r"^([0-9]|[1-9][0-9]|100)%$"
# The labels the operator puts on every pod (shoal.operator.naming): the Deployments select their pods by them.
RESERVED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
)
RESERVED_PREFIX = "shoal.dev/"
_LIST = 64


def _int_or_percent(value: int | str) -> int | str:
    bad = value < 0 if isinstance(value, int) else re.fullmatch(PERCENT, value) is None
    if bad:
        raise ValueError("must be a count (0 or more) or a percentage from 0% to 100%")
    return value


IntOrPercent = Annotated[
    int | str,
    AfterValidator(_int_or_percent),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "x-kubernetes-validations": [
                {
                    "rule": f"type(self) == int ? self >= 0 : self.matches('{PERCENT}')",
                    "message": "must be a count (0 or more) or a percentage from 0% to 100%",
                }
            ],
        }
    ),
]


def _percent(value: str) -> int:
    return int(value.removesuffix("%"))


class PodDisruptionBudgetSpec(Wire):
    """The pods' PodDisruptionBudget (policy/v1): how many a voluntary disruption (a node drain, a cluster
    upgrade) may take at once. One of maxUnavailable or minAvailable; maxUnavailable 1 if neither is set. Pods
    that are not ready may always be evicted (unhealthyPodEvictionPolicy: AlwaysAllow)."""

    model_config = cel(
        (
            "!has(self.maxUnavailable) || !has(self.minAvailable)",
            "podDisruptionBudget takes one of maxUnavailable or minAvailable, not both",
        ),
        (
            "!has(self.maxUnavailable) || (type(self.maxUnavailable) == int ? self.maxUnavailable != 0 : "
            "self.maxUnavailable != '0%')",
            "podDisruptionBudget.maxUnavailable 0 blocks every eviction, so node drains never finish: give 1 or more",
            ".maxUnavailable",
        ),
    )

    max_unavailable: IntOrPercent | None = Field(
        None, description="Pods a disruption may take down at once: a count, or a percentage rounded up."
    )
    min_available: IntOrPercent | None = Field(
        None,
        description="Pods that must stay up through a disruption: a count, or a percentage rounded up. It must be "
        "below the most replicas, or it blocks every eviction.",
    )

    @model_validator(mode="after")
    def _evictable(self) -> PodDisruptionBudgetSpec:
        if self.max_unavailable is not None and self.min_available is not None:
            raise ValueError("podDisruptionBudget takes one of maxUnavailable or minAvailable, not both")
        if self.max_unavailable in (0, "0%"):
            raise ValueError(
                "podDisruptionBudget.maxUnavailable 0 blocks every eviction, so node drains never finish: "
                "give 1 or more"
            )
        return self

    def blocks_evictions(self, replicas: int) -> bool:
        """Whether ``minAvailable`` keeps all of ``replicas`` pods up (no eviction could ever be allowed)."""
        least = self.min_available
        if least is None or least in (0, "0%"):
            return False
        if isinstance(least, int):
            return least >= replicas
        return _percent(least) * replicas > (replicas - 1) * 100  # ceil(p% of n) >= n

    def policy(self) -> dict[str, Any]:
        """The PodDisruptionBudget's own fields."""
        if self.min_available is not None:
            return {"minAvailable": self.min_available}
        return {"maxUnavailable": 1 if self.max_unavailable is None else self.max_unavailable}


def blocking_rule(budget: str, replicas: str) -> str:
    """The CEL twin of :meth:`PodDisruptionBudgetSpec.blocks_evictions`, negated (the rule holds when evictions
    stay possible): ``budget`` is the budget's CEL path, ``replicas`` the expression for the most pods it covers."""
    least = f"{budget}.minAvailable"
    return (
        f"!has({least}) || (type({least}) == int ? {least} == 0 || {least} < {replicas} : "
        f"{least} == '0%' || int({least}.replace('%', '')) * {replicas} <= ({replicas} - 1) * 100)"
    )


_LABELS_OWN = (
    f"podLabels cannot set the operator's own labels ({', '.join(RESERVED_LABELS)}, {RESERVED_PREFIX}*): the "
    "Deployments select their pods by them"
)
_ANNOTATIONS_OWN = f"podAnnotations cannot set the operator's own annotations ({RESERVED_PREFIX}*)"
_LABEL_RULES: list[JsonValue] = [
    {
        "rule": f"self.all(k, !(k in {list(RESERVED_LABELS)}) && !k.startsWith('{RESERVED_PREFIX}'))",
        "message": _LABELS_OWN,
    }
]
_ANNOTATION_RULES: list[JsonValue] = [
    {"rule": f"self.all(k, !k.startsWith('{RESERVED_PREFIX}'))", "message": _ANNOTATIONS_OWN}
]


class PodFields(Wire):
    """The pod-spec fields engines and gateways share (core API names); each model adds its own resources."""

    node_selector: dict[str, str] = Field(
        default_factory=dict,
        max_length=_LIST,
        description="Node labels the pods require (pod.spec.nodeSelector); kubernetes.io/os: linux is added "
        "unless given.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=_LIST, description="Taints the pods tolerate (pod.spec.tolerations)."
    )
    affinity: Affinity | None = Field(
        None, description="Node and pod affinity (pod.spec.affinity), as the core API writes it."
    )
    priority_class_name: ObjectName | None = Field(
        None, description="The PriorityClass of the pods (pod.spec.priorityClassName): who is preempted first."
    )
    runtime_class_name: ObjectName | None = Field(
        None, description="The RuntimeClass the pods run under (pod.spec.runtimeClassName), e.g. nvidia."
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=_LIST,
        description="Secrets holding registry credentials for the pods' images (pod.spec.imagePullSecrets).",
    )
    pod_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        max_length=_LIST,
        description="Labels added to the pods (not to the Deployment's selector).",
        json_schema_extra={"x-kubernetes-validations": _LABEL_RULES},
    )
    pod_annotations: dict[LabelKey, str] = Field(
        default_factory=dict,
        max_length=_LIST,
        description="Annotations added to the pods; they replace the operator's prometheus.io/* ones of the same key.",
        json_schema_extra={"x-kubernetes-validations": _ANNOTATION_RULES},
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=_LIST,
        description="Environment variables of the container (value, or valueFrom a Secret, ConfigMap or the pod).",
    )
    env_from: list[EnvFromSource] = Field(
        default_factory=list,
        max_length=_LIST,
        description="ConfigMaps and Secrets whose every key becomes an environment variable.",
    )
    pod_disruption_budget: PodDisruptionBudgetSpec = Field(
        default_factory=PodDisruptionBudgetSpec,
        description="The pods' PodDisruptionBudget: maxUnavailable 1 unless set.",
    )

    @model_validator(mode="after")
    def _own_metadata(self) -> PodFields:
        if any(k in RESERVED_LABELS or k.startswith(RESERVED_PREFIX) for k in self.pod_labels):
            raise ValueError(_LABELS_OWN)
        if any(k.startswith(RESERVED_PREFIX) for k in self.pod_annotations):
            raise ValueError(_ANNOTATIONS_OWN)
        return self
