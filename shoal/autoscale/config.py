"""The autoscaler's knobs, free of the operator's CRD types so the simulator and ``shoal up`` share them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AutoscalingConfig:
    """Targets and limits of one fleet (the CRD's ``spec.replicas`` and ``spec.autoscaling``).

    ``tolerance`` is the dead band around the fleet's size in which load changes move nothing (as HPA's 0.1);
    ``target_utilization`` is the share of a replica's measured capacity the fleet is sized to use, the headroom
    that absorbs arrival noise between decisions; ``burst_memory_seconds`` is how long the fleet keeps the size a
    breach needed when replicas could not start in time to answer it (bursts recur; 0 turns this off);
    ``startup_timeout_seconds`` is how long a replica may stay starting before it stops counting as capacity on
    its way (a pod that never loads must not block every later scale-up); ``predictive`` holds the replicas the
    arrival rate forecast one start-up ahead needs as a floor (:mod:`shoal.autoscale.forecast`), its seasonal
    shape ``season_seconds`` long (a day: the time of day)."""

    min_replicas: int = 1
    max_replicas: int = 4
    queue_depth_per_replica: float = 4.0
    ttft_p95_seconds: float = 2.0
    scale_up_stabilization_seconds: float = 0.0
    scale_down_stabilization_seconds: float = 300.0
    max_step: int = 2
    tolerance: float = 0.1
    target_utilization: float = 0.9
    burst_memory_seconds: float = 1800.0
    startup_timeout_seconds: float = 900.0
    predictive: bool = False
    season_seconds: float = 86400.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 0 <= min_replicas ({self.min_replicas}) <= max_replicas ({self.max_replicas})")
        if self.max_step < 1:
            raise ValueError(f"max_step must be at least 1, got {self.max_step}")
        if self.queue_depth_per_replica <= 0 or self.ttft_p95_seconds <= 0:
            raise ValueError("queue_depth_per_replica and ttft_p95_seconds must be positive")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance must be in [0, 1), got {self.tolerance}")
        if self.burst_memory_seconds < 0:
            raise ValueError(f"burst_memory_seconds must be >= 0, got {self.burst_memory_seconds}")
        if self.startup_timeout_seconds <= 0:
            raise ValueError(f"startup_timeout_seconds must be > 0, got {self.startup_timeout_seconds}")
        if not self.season_seconds > 0:
            raise ValueError(f"season_seconds must be > 0, got {self.season_seconds}")
        if not 0 < self.target_utilization <= 1:
            raise ValueError(f"target_utilization must be in (0, 1], got {self.target_utilization}")
