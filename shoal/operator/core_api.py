"""The core Kubernetes API's pod-spec shapes that an InferenceDeployment embeds, as typed models.

``affinity``, ``tolerations``, ``env`` (with ``valueFrom``), ``envFrom``, ``imagePullSecrets`` and ``resources``
keep the names and shapes of the core API (``kubectl explain pod.spec`` reads the same), so a pod spec a platform
team already has can be pasted in. They are typed here rather than left open (``x-kubernetes-preserve-unknown-
fields``): the apiserver then refuses a bad value when the InferenceDeployment is written, naming its field, instead
of the operator failing later when the Deployment it writes is refused. Each CEL rule is mirrored by a validator,
so ``shoal up`` refuses the same manifests in the same words.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from shoal.operator.quantity import quantity_value
from shoal.operator.wire import Quantity, Wire, cel

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = rf"^({_PREFIX}/)?{_NAME}$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
EXTENDED_RESOURCE = rf"^{_PREFIX}/{_NAME}$"
RESOURCE_NAME = rf"^(cpu|memory|ephemeral-storage|hugepages-[0-9]+[KMGTPE]i?|{_PREFIX}/{_NAME})$"

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
LabelKey = Annotated[
    str, Field(max_length=317, pattern=QUALIFIED_NAME, description="a label or annotation key ([PREFIX/]NAME)")
]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
ResourceName = Annotated[
    str,
    Field(
        max_length=317,
        pattern=RESOURCE_NAME,
        description="a resource name: cpu, memory, ephemeral-storage, hugepages-<size> or DOMAIN/NAME",
    ),
]
ResourceList = Annotated[dict[ResourceName, Quantity], Field(max_length=16)]
# The most items of a list here: bounds the cost the apiserver estimates for the CEL rules over them (a rule in
# a list item nested in another list is counted once per possible item of both).
_LIST = 64
_TERMS = 16
NodeValue = Annotated[str, Field(max_length=253)]


def _exactly_one(*fields: str) -> str:
    return "[" + ", ".join(f"has(self.{f})" for f in fields) + "].filter(x, x).size() == 1"


class LocalObjectReference(Wire):
    """An object in the InferenceDeployment's namespace, by name."""

    name: ObjectName = Field(description="The object's name.")


class ConfigMapKeySelector(Wire):
    """One key of a ConfigMap."""

    name: ObjectName = Field(description="The ConfigMap's name.")
    key: str = Field(min_length=1, max_length=253, description="The key.")
    optional: bool | None = Field(None, description="Start even if the ConfigMap or its key is missing.")


class SecretKeySelector(Wire):
    """One key of a Secret."""

    name: ObjectName = Field(description="The Secret's name.")
    key: str = Field(min_length=1, max_length=253, description="The key.")
    optional: bool | None = Field(None, description="Start even if the Secret or its key is missing.")


class ObjectFieldSelector(Wire):
    """A field of the pod (the downward API)."""

    api_version: str | None = Field(None, description="The schema fieldPath is written in; v1 if unset.")
    field_path: str = Field(min_length=1, description="e.g. metadata.name, status.podIP, spec.nodeName.")


class ResourceFieldSelector(Wire):
    """A resource request or limit of a container (the downward API)."""

    container_name: str | None = Field(None, description="The container; this one if unset.")
    resource: str = Field(min_length=1, description="e.g. limits.cpu, requests.memory.")
    divisor: Quantity | None = Field(None, description="The unit the value is given in; 1 if unset.")


class EnvVarSource(Wire):
    """Where an environment variable's value comes from: exactly one source."""

    model_config = cel(
        (
            _exactly_one("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"),
            "valueFrom takes exactly one of fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef",
        )
    )

    field_ref: ObjectFieldSelector | None = Field(None, description="A field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(None, description="A container's request or limit.")
    config_map_key_ref: ConfigMapKeySelector | None = Field(None, description="A key of a ConfigMap.")
    secret_key_ref: SecretKeySelector | None = Field(None, description="A key of a Secret.")

    @model_validator(mode="after")
    def _one(self) -> EnvVarSource:
        given = [self.field_ref, self.resource_field_ref, self.config_map_key_ref, self.secret_key_ref]
        if sum(source is not None for source in given) != 1:
            raise ValueError(
                "valueFrom takes exactly one of fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef"
            )
        return self


class EnvVar(Wire):
    """An environment variable of the container, as the core API's ``env`` item."""

    model_config = cel(("!has(self.value) || !has(self.valueFrom)", "an env entry takes value or valueFrom, not both"))

    name: str = Field(min_length=1, max_length=256, pattern=r"^[^=]+$", description="The variable's name.")
    value: str | None = Field(None, description="Its value; $(VAR) expands another variable.")
    value_from: EnvVarSource | None = Field(None, description="Its value read from a Secret, ConfigMap or the pod.")

    @model_validator(mode="after")
    def _one(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("an env entry takes value or valueFrom, not both")
        return self


class ConfigMapEnvSource(Wire):
    """Every key of a ConfigMap as a variable."""

    name: ObjectName = Field(description="The ConfigMap's name.")
    optional: bool | None = Field(None, description="Start even if the ConfigMap is missing.")


class SecretEnvSource(Wire):
    """Every key of a Secret as a variable."""

    name: ObjectName = Field(description="The Secret's name.")
    optional: bool | None = Field(None, description="Start even if the Secret is missing.")


class EnvFromSource(Wire):
    """Every key of one ConfigMap or Secret as an environment variable, as the core API's ``envFrom`` item."""

    model_config = cel(
        (_exactly_one("configMapRef", "secretRef"), "an envFrom entry takes exactly one of configMapRef or secretRef")
    )

    prefix: str | None = Field(None, description="Put before each key to make the variable's name.")
    config_map_ref: ConfigMapEnvSource | None = Field(None, description="The ConfigMap.")
    secret_ref: SecretEnvSource | None = Field(None, description="The Secret.")

    @model_validator(mode="after")
    def _one(self) -> EnvFromSource:
        if (self.config_map_ref is None) == (self.secret_ref is None):
            raise ValueError("an envFrom entry takes exactly one of configMapRef or secretRef")
        return self


class Toleration(Wire):
    """A taint the pods tolerate, as the core API's ``tolerations`` item."""

    model_config = cel(
        (
            "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "a toleration with operator Exists takes no value",
        ),
        ("has(self.key) || self.operator == 'Exists'", "a toleration without a key needs operator Exists"),
        (
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "tolerationSeconds needs effect NoExecute",
        ),
    )

    key: str | None = Field(None, description="The taint's key; empty with operator Exists tolerates every taint.")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Equal compares the value; Exists any value.")
    value: str | None = Field(None, description="The taint's value, for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="The taint effect tolerated; every effect if unset."
    )
    toleration_seconds: int | None = Field(
        None, description="With effect NoExecute: how long the pod stays bound after the taint appears."
    )

    @model_validator(mode="after")
    def _core_rules(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self


REQUESTS_WITHIN_LIMITS = (
    "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || "
    "quantity(self.requests[k]).compareTo(quantity(self.limits[k])) <= 0)",
    "every request must be less than or equal to its limit",
    ".requests",
)


class ResourceRequirements(Wire):
    """Requests and limits per container, as the core API's ``resources``: a request alone leaves the resource
    unlimited; a limit alone makes the request equal to it."""

    model_config = cel(REQUESTS_WITHIN_LIMITS)

    requests: ResourceList | None = Field(None, description="What the scheduler reserves, e.g. {cpu: 500m}.")
    limits: ResourceList | None = Field(None, description="The most the container may use, e.g. {memory: 1Gi}.")

    @model_validator(mode="after")
    def _within_limits(self) -> ResourceRequirements:
        requests, limits = self.requests or {}, self.limits or {}
        if any(k in limits and quantity_value(v) > quantity_value(limits[k]) for k, v in requests.items()):
            raise ValueError(REQUESTS_WITHIN_LIMITS[1])
        return self


# affinity: the core API's Affinity, field for field
_VALUES_RULE = (
    "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : "
    "self.operator in ['Exists', 'DoesNotExist'] ? !has(self.values) || size(self.values) == 0 : "
    "has(self.values) && size(self.values) == 1 && self.values[0].matches('^-?[0-9]+$')",
    "operator In and NotIn need values, Exists and DoesNotExist take none, Gt and Lt take one integer",
)


def _values_fit(operator: str, values: list[str]) -> bool:
    """Python's reading of ``_VALUES_RULE``."""
    if operator in ("In", "NotIn"):
        return bool(values)
    if operator in ("Exists", "DoesNotExist"):
        return not values
    return len(values) == 1 and re.fullmatch(r"-?[0-9]+", values[0]) is not None


class _Requirement(Wire):
    """A key compared with values (the shared rule of node and label selector requirements)."""

    model_config = cel(_VALUES_RULE)

    operator: str
    values: list[str]

    @model_validator(mode="after")
    def _values(self) -> _Requirement:
        if not _values_fit(self.operator, self.values):
            raise ValueError(_VALUES_RULE[1])
        return self


class NodeSelectorRequirement(_Requirement):
    """A node label (or field) compared with values."""

    key: str = Field(min_length=1, max_length=317, description="The node label (or field) key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(description="The comparison.")
    values: list[NodeValue] = Field(default_factory=list, max_length=_LIST, description="The values compared with.")


class NodeSelectorTerm(Wire):
    """Requirements that must all hold (an empty term matches no node)."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=_TERMS, description="Requirements on node labels."
    )
    match_fields: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=_TERMS, description="Requirements on node fields (metadata.name)."
    )


class NodeSelector(Wire):
    """Terms of which at least one must match."""

    node_selector_terms: list[NodeSelectorTerm] = Field(min_length=1, max_length=_TERMS, description="ORed terms.")


class PreferredSchedulingTerm(Wire):
    """A weighted preference for nodes."""

    weight: int = Field(ge=1, le=100, description="Added to a node's score when the preference matches (1-100).")
    preference: NodeSelectorTerm = Field(description="The nodes preferred.")


class NodeAffinity(Wire):
    """Which nodes the pods run on, by node labels."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        None, description="Nodes the pods may run on; a pod waits unscheduled when none matches."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list, max_length=_TERMS, description="Nodes the scheduler prefers, by weight."
    )


class LabelSelectorRequirement(_Requirement):
    """A label compared with values."""

    key: str = Field(min_length=1, max_length=317, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="The comparison.")
    values: list[LabelValue] = Field(default_factory=list, max_length=_LIST, description="The values compared with.")


class LabelSelector(Wire):
    """Objects selected by their labels (both parts must hold)."""

    match_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=_LIST, description="Labels that must equal these values."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=_TERMS, description="Requirements on labels."
    )


class PodAffinityTerm(Wire):
    """Pods (by labels, in some namespaces) whose topology domain (node, zone) counts."""

    label_selector: LabelSelector | None = Field(None, description="The pods; none if unset.")
    namespace_selector: LabelSelector | None = Field(None, description="Their namespaces, by labels.")
    namespaces: list[str] = Field(
        default_factory=list, max_length=_LIST, description="Their namespaces, by name; this one if both unset."
    )
    topology_key: str = Field(
        min_length=1, max_length=317, description="The node label naming the domain, e.g. kubernetes.io/hostname."
    )
    match_label_keys: list[str] = Field(
        default_factory=list, max_length=_LIST, description="Label keys whose values the pods must share with this one."
    )
    mismatch_label_keys: list[str] = Field(
        default_factory=list, max_length=_LIST, description="Label keys whose values the pods must not share."
    )


class WeightedPodAffinityTerm(Wire):
    """A weighted preference for (or against) a topology domain."""

    weight: int = Field(ge=1, le=100, description="Added to a node's score when the term matches (1-100).")
    pod_affinity_term: PodAffinityTerm = Field(description="The term.")


class PodAffinity(Wire):
    """Run near pods that match: in the same topology domain."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(
        default_factory=list, max_length=_TERMS, description="Terms that must hold."
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default_factory=list, max_length=_TERMS, description="Terms preferred, by weight."
    )


class PodAntiAffinity(PodAffinity):
    """Run away from pods that match: never (or preferably not) in the same topology domain."""


class Affinity(Wire):
    """The pods' scheduling constraints, as the core API's ``affinity``."""

    node_affinity: NodeAffinity | None = Field(None, description="Node affinity: which nodes, by their labels.")
    pod_affinity: PodAffinity | None = Field(None, description="Near which pods.")
    pod_anti_affinity: PodAntiAffinity | None = Field(None, description="Away from which pods.")
