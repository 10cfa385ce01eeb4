"""Policies compared on one trace: size the fleet as a team would, then run each policy on the same requests.

Every policy gets the same trace, profile, seed (so the same start-up times in the same order), routing policy
and bounds; each run starts warm with the replicas the trace's first five minutes need (the fixed fleet with its
own size), as if the fleet had been serving before the trace began.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shoal.autoscale import AutoscalingConfig, ScalingPolicy
from shoal.gateway.routing import make_policy
from shoal.simulate.bounds import oracles
from shoal.simulate.policies import Sizing, check_policy_names, make_scaling_policy
from shoal.simulate.profile import EngineProfile
from shoal.simulate.results import summarize_run
from shoal.simulate.simulator import SimConfig, SimRun, simulate
from shoal.simulate.sizing import ReplicaCapacity, peak_rate, replica_capacity, replicas_for
from shoal.simulate.startup_modes import COLD, StartupMode
from shoal.simulate.trace import Trace

WARM_START_S = 300.0


@dataclass
class Comparison:
    trace: Trace
    profile: EngineProfile
    slo_ttft_p95_s: float
    capacity: ReplicaCapacity
    sizing: Sizing
    config: AutoscalingConfig
    runs: dict[str, SimRun]
    results: dict[str, dict[str, object]]


def default_replicas_max(peak_replicas: int) -> int:
    return max(4, 2 * peak_replicas)


def compare(
    trace: Trace,
    profile: EngineProfile,
    policies: Sequence[str],
    slo_ttft_p95_s: float = 2.0,
    routing: str = "prefix-aware",
    replicas_min: int = 1,
    replicas_max: int | None = None,
    seed: int = 0,
    max_step: int | None = None,
    progress: Callable[[str], Callable[[float], None] | None] | None = None,
    engine_kind: str = "shoal",
    bounds: bool = False,
    startup: StartupMode = COLD,
    season_seconds: float = 86400.0,
    burst_memory_seconds: float | None = None,
) -> Comparison:
    """Runs each named policy on ``trace`` (see the module docstring), then with ``bounds`` the fixed-peak fleet
    (unless named) and the oracles of :mod:`shoal.simulate.bounds`; ``progress(policy)`` may return a callback
    that receives the simulated time as the run advances."""
    check_policy_names(list(policies))
    make_policy(routing)  # an unknown routing policy fails here, before the load test
    capacity = replica_capacity(profile, trace, slo_ttft_p95_s, seed)
    peak = replicas_for(peak_rate(trace), capacity)
    sizing = Sizing(capacity.concurrency, peak, capacity.max_rps)
    if replicas_max is None:
        replicas_max = default_replicas_max(peak)
    config = AutoscalingConfig(
        min_replicas=replicas_min,
        max_replicas=replicas_max,
        ttft_p95_seconds=slo_ttft_p95_s,
        max_step=AutoscalingConfig.max_step if max_step is None else max_step,
        season_seconds=season_seconds,
        burst_memory_seconds=(
            AutoscalingConfig.burst_memory_seconds if burst_memory_seconds is None else burst_memory_seconds
        ),
    )
    startup.check_against(replicas_max)
    early = trace.arrival < WARM_START_S
    early_rate = float(np.sum(early)) / min(WARM_START_S, max(trace.duration, 1.0))
    warm = min(max(replicas_for(early_rate, capacity), replicas_min), replicas_max)
    rows: list[tuple[ScalingPolicy, int]] = []
    for name in policies:
        rows.append((make_scaling_policy(name, config, sizing), min(peak, replicas_max) if name == "fixed" else warm))
    if bounds:
        if "fixed" not in policies:
            rows.append((make_scaling_policy("fixed", config, sizing), min(peak, replicas_max)))
        rows += [(oracle, oracle.initial_replicas()) for oracle in oracles(trace, profile, capacity, replicas_max)]
    runs: dict[str, SimRun] = {}
    results: dict[str, dict[str, object]] = {}
    for policy, initial in rows:
        sim_config = SimConfig(seed=seed, initial_replicas=initial, engine_kind=engine_kind, startup=startup)
        callback = progress(policy.name) if progress is not None else None
        run = simulate(trace, profile, policy, make_policy(routing), sim_config, callback)
        runs[policy.name] = run
        results[policy.name] = summarize_run(run, slo_ttft_p95_s, trace.bursts)
    return Comparison(trace, profile, slo_ttft_p95_s, capacity, sizing, config, runs, results)


def format_table(comparison: Comparison) -> str:
    """The comparison as a plain-text table, one row per policy."""
    header = (
        f"{'policy':<16}{'SLO windows':>12}{'replica-h':>11}{'TTFT p50':>10}{'TTFT p95':>10}{'ITL p50':>9}"
        f"{'scale ev':>9}{'rev/10m':>8}{'peak':>6}{'served':>9}{'dropped':>8}"
    )
    lines = [header]
    for name, r in comparison.results.items():
        requests = r["requests"]
        assert isinstance(requests, dict)
        dropped = sum(requests["dropped"].values())
        lines.append(
            f"{name:<16}{_pct(r['slo_attainment']):>12}{r['replica_hours']:>11.2f}{_s(r['ttft_p50_s']):>10}"
            f"{_s(r['ttft_p95_s']):>10}{_s(r['itl_p50_s']):>9}{r['scale_events']:>9}"
            f"{r['max_reversals_per_10min']:>8}{r['peak_replicas']:>6}{requests['served']:>9}{dropped:>8}"
        )
    return "\n".join(lines)


def _pct(value: object) -> str:
    return "n/a" if value is None else f"{100 * float(value):.1f}%"  # type: ignore[arg-type]


def _s(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "n/a"
    return f"{float(value):.3f}"  # type: ignore[arg-type]
