"""The Shoal operator: the InferenceDeployment API, its CRD, and the kopf reconciler that runs it.

Run it with ``shoal operator``; print the CRD with ``shoal crd``. An autoscaler plugs in through
:class:`Autoscaler` (a pure function returning a :class:`ScaleDecision`).
"""

from shoal.operator.crd import build_crd, render_crd
from shoal.operator.replicas import Autoscaler, ScaleDecision, decide_replicas
from shoal.operator.spec import InferenceDeploymentSpec, InferenceDeploymentStatus

__all__ = [
    "Autoscaler",
    "InferenceDeploymentSpec",
    "InferenceDeploymentStatus",
    "ScaleDecision",
    "build_crd",
    "decide_replicas",
    "render_crd",
]
