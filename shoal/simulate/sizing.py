"""Sizing a fleet for a trace the way an operator would: load-test one replica, then divide.

The baselines need numbers a careful team would have chosen before switching them on: the fixed fleet's size
for the trace's peak, and the per-replica concurrency target HPA and Knative are given. Both come from a load
test of one simulated replica (the same engine model and profile) with requests drawn from the trace itself:
the highest Poisson arrival rate at which its TTFT P95 still meets the SLO, found by bisection, and the mean
number of requests in the engine at that rate (Little's law: the sum of the requests' time in the system over
the test's length). Everything is seeded, so the sizing is as deterministic as the simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import RoundRobin
from shoal.simulate.profile import EngineProfile
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.trace import Trace

LOAD_TEST_REQUESTS = 2000
BISECTION_STEPS = 12


@dataclass(frozen=True)
class ReplicaCapacity:
    """One replica under this trace's requests: the most requests per second meeting the SLO, and the requests
    in the engine (running + waiting) at that rate."""

    max_rps: float
    concurrency: float


def peak_rate(trace: Trace, window_s: float = 60.0) -> float:
    """The highest arrival rate over any ``window_s`` window aligned to the trace's start (requests/s)."""
    if not len(trace):
        return 0.0
    counts = np.bincount((trace.arrival // window_s).astype(np.int64))
    return float(counts.max()) / window_s


def _load_test(
    profile: EngineProfile,
    prompt: np.ndarray,
    output: np.ndarray,
    group: np.ndarray,
    prefix: np.ndarray,
    rate: float,
    seed: int,
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, len(prompt)))
    trace = Trace("load-test", arrival, prompt, output, group, prefix)
    run = simulate(trace, profile, FixedForPeak(1), RoundRobin(), SimConfig(seed=seed, initial_replicas=1))
    ttft = np.where(np.isnan(run.first_token), np.inf, run.first_token - arrival)
    in_system = np.where(np.isnan(run.finish), run.end_time, run.finish) - arrival
    return float(np.percentile(ttft, 95)), float(in_system.sum() / max(run.end_time, 1e-9))


def replica_capacity(profile: EngineProfile, trace: Trace, slo_ttft_p95_s: float, seed: int = 0) -> ReplicaCapacity:
    """Bisects the arrival rate one replica serves within the SLO (see the module docstring)."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(trace), size=min(LOAD_TEST_REQUESTS, len(trace)), replace=False)
    shapes = (trace.prompt_tokens[pick], trace.output_tokens[pick], trace.prefix_group[pick], trace.prefix_tokens[pick])
    fits = shapes[0] + shapes[1] <= profile.kv_capacity_tokens
    shapes = tuple(column[fits] for column in shapes)
    estimate = profile.capacity_rps(float(shapes[0].mean()), float(shapes[1].mean()))
    low, high = 0.0, 4.0 * estimate
    concurrency = 0.0
    for _ in range(BISECTION_STEPS):
        rate = (low + high) / 2
        p95, in_engine = _load_test(profile, *shapes, rate=rate, seed=seed)
        if p95 <= slo_ttft_p95_s:
            low, concurrency = rate, in_engine
        else:
            high = rate
    if low == 0.0:
        raise ValueError(
            f"one replica of profile {profile.name} cannot meet a TTFT P95 of {slo_ttft_p95_s:g} s for "
            "this trace's requests at any rate; raise --slo-ttft-p95"
        )
    return ReplicaCapacity(low, concurrency)


def replicas_for(rate: float, capacity: ReplicaCapacity) -> int:
    """Replicas that serve ``rate`` requests/s within the SLO, by the load test."""
    return max(1, math.ceil(rate / capacity.max_rps))
