"""Names, labels and owner references shared by every child of an InferenceDeployment.

Children are found again by labels (the status is computed from what the watches saw) and deleted by the garbage
collector through their owner reference, so both live here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shoal.operator.spec import GROUP, KIND, VERSION

FIELD_MANAGER = "shoal-operator"
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
OWNER_LABEL = f"{GROUP}/inference-deployment"
ENGINE_PORT = 8000
GATEWAY_PORT = 8080


@dataclass(frozen=True)
class Owner:
    """The InferenceDeployment a child belongs to."""

    name: str
    namespace: str
    uid: str

    @property
    def engine_name(self) -> str:
        return f"{self.name}-engine"

    @property
    def gateway_name(self) -> str:
        return f"{self.name}-gateway"

    @property
    def gateway_service_name(self) -> str:
        """The address clients use: ``http://<name>.<namespace>.svc``."""
        return self.name

    def labels(self, component: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "shoal",
            INSTANCE_LABEL: self.name,
            COMPONENT_LABEL: component,
            MANAGED_BY_LABEL: FIELD_MANAGER,
            OWNER_LABEL: self.name,
        }

    def selector(self, component: str) -> dict[str, str]:
        return {INSTANCE_LABEL: self.name, COMPONENT_LABEL: component}

    def selector_string(self, component: str) -> str:
        """The label selector as text: what the scale subresource reports (``status.selector``)."""
        return ",".join(f"{k}={v}" for k, v in self.selector(component).items())

    def metadata(self, name: str, component: str, **extra: Any) -> dict[str, Any]:
        """``metadata`` for a child: namespace, labels and the controlling owner reference."""
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": self.labels(component),
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "name": self.name,
                    "uid": self.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            **extra,
        }
