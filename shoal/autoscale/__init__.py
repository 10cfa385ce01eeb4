"""shoal.autoscale: the pure autoscaling policy and what it reads and returns."""

from shoal.autoscale.config import AutoscalingConfig
from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.policy import ScalingPolicy
from shoal.autoscale.shoal_policy import ShoalPolicy
from shoal.autoscale.signals import FleetSignals, ReplicaSignals

__all__ = [
    "AutoscalingConfig",
    "FleetSignals",
    "ReplicaSignals",
    "ScalingDecision",
    "ScalingPolicy",
    "ShoalPolicy",
]
