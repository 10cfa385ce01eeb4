"""Policies by name, built as the comparison runs them: Shoal's own and the peers' baselines.

Each is the real object from :mod:`shoal.autoscale` (the class the operator and ``shoal up`` run, or the
baseline in :mod:`shoal.autoscale.baselines`); this module only fills in what a team would have configured:
the fleet's bounds and SLO, the per-replica concurrency target HPA and Knative are given (70% of what one
replica holds at the SLO in a load test, Knative's default utilization), and the fixed fleet's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.autoscale import AutoscalingConfig, ScalingPolicy, ShoalPolicy
from shoal.autoscale.baselines import FixedForPeak, HPAStyle, KEDAStyle, KPAStyle

POLICY_NAMES = ("shoal", "hpa", "keda", "kpa", "fixed")
TARGET_UTILIZATION = 0.7


@dataclass(frozen=True)
class Sizing:
    """What the load test and the trace's peak told the team (see :mod:`shoal.simulate.sizing`)."""

    slo_concurrency: float
    peak_replicas: int


def check_policy_names(names: list[str]) -> None:
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICY_NAMES)}")


def make_scaling_policy(name: str, config: AutoscalingConfig, sizing: Sizing) -> ScalingPolicy:
    """A fresh policy object (each run starts with no history)."""
    check_policy_names([name])
    target = max(1.0, sizing.slo_concurrency * TARGET_UTILIZATION)
    if name == "shoal":
        return ShoalPolicy(config)
    if name == "hpa":
        return HPAStyle(config, target)
    if name == "keda":
        return KEDAStyle(config)
    if name == "kpa":
        return KPAStyle(config, max(1.0, sizing.slo_concurrency))
    return FixedForPeak(min(sizing.peak_replicas, config.max_replicas))
