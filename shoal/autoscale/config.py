"""The autoscaler's knobs, free of the operator's CRD types so the simulator and ``shoal up`` share them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AutoscalingConfig:
    """Targets and limits of one fleet (the CRD's ``spec.replicas`` and ``spec.autoscaling``)."""

    min_replicas: int = 1
    max_replicas: int = 4
    queue_depth_per_replica: float = 4.0
    ttft_p95_seconds: float = 2.0
    scale_up_stabilization_seconds: float = 0.0
    scale_down_stabilization_seconds: float = 300.0
    max_step: int = 2
