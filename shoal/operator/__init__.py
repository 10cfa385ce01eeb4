"""The Shoal operator: the InferenceDeployment API, its CRD, and the kopf reconciler that runs it.

Run it with ``shoal operator``; print the CRD with ``shoal crd``. With ``autoscaling.enabled`` the
:class:`FleetAutoscaler` (one pure policy per InferenceDeployment, fed by a metrics source) owns the engine count.
"""

from shoal.operator.autoscaler import FleetAutoscaler, FleetRef
from shoal.operator.crd import build_crd, render_crd
from shoal.operator.replicas import ScaleDecision, decide_replicas
from shoal.operator.spec import InferenceDeploymentSpec, InferenceDeploymentStatus

__all__ = [
    "FleetAutoscaler",
    "FleetRef",
    "InferenceDeploymentSpec",
    "InferenceDeploymentStatus",
    "ScaleDecision",
    "build_crd",
    "decide_replicas",
    "render_crd",
]
