"""Policies by name, built as the comparison runs them: Shoal's own and the peers' baselines.

Each is the real object from :mod:`shoal.autoscale` (the class the operator and ``shoal up`` run, or the
baseline in :mod:`shoal.autoscale.baselines`); this module only fills in what a team would have configured:
the fleet's bounds and SLO (and ``shoal-predictive``'s season, ``--season-seconds``), the per-replica concurrency target HPA and Knative are given (70% of what one
replica holds at the SLO in a load test, Knative's default utilization), the rate per replica Dynamo's planner
profiles, and the fixed fleet's size. The peers' SLO laws (llm-d's, Dynamo's) are given the team's TTFT SLO in
place of their recipes' own, and keep their published TPOT/ITL target (100 ms).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shoal.autoscale import AutoscalingConfig, ScalingPolicy, ShoalPolicy
from shoal.autoscale.baselines import FixedForPeak, HPAStyle, KEDAStyle, KPAStyle
from shoal.autoscale.peer_laws import AIBrixKPA, DynamoPlanner, LlmdQueue, LlmdSLO

POLICY_NAMES = (
    "shoal",
    "shoal-predictive",
    "hpa",
    "keda",
    "kpa",
    "llmd-slo",
    "llmd-queue",
    "dynamo",
    "aibrix",
    "fixed",
)
TARGET_UTILIZATION = 0.7


@dataclass(frozen=True)
class Sizing:
    """What the load test and the trace's peak told the team (see :mod:`shoal.simulate.sizing`)."""

    slo_concurrency: float
    peak_replicas: int
    slo_rps: float


def check_policy_names(names: list[str]) -> None:
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICY_NAMES)}")


def make_scaling_policy(name: str, config: AutoscalingConfig, sizing: Sizing) -> ScalingPolicy:
    """A fresh policy object (each run starts with no history)."""
    check_policy_names([name])
    target = max(1.0, sizing.slo_concurrency * TARGET_UTILIZATION)
    if name == "shoal":
        return ShoalPolicy(replace(config, predictive=False))
    if name == "shoal-predictive":
        return ShoalPolicy(replace(config, predictive=True))
    if name == "hpa":
        return HPAStyle(config, target)
    if name == "keda":
        return KEDAStyle(config)
    if name == "kpa":
        return KPAStyle(config, max(1.0, sizing.slo_concurrency))
    if name == "llmd-slo":
        return LlmdSLO(config, config.ttft_p95_seconds)
    if name == "llmd-queue":
        return LlmdQueue(config)
    if name == "dynamo":
        return DynamoPlanner(config, sizing.slo_rps, config.ttft_p95_seconds)
    if name == "aibrix":
        return AIBrixKPA(config, max(1.0, sizing.slo_concurrency))
    return FixedForPeak(min(sizing.peak_replicas, config.max_replicas))
