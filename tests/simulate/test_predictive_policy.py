"""Shoal's policy with its predictive floor on, in the simulator: the same run, the forecast in its decisions."""

from __future__ import annotations

import numpy as np
from sim_fixtures import small_profile

from shoal.simulate.compare import compare
from shoal.simulate.trace import Trace, make_trace

SEASON = 1200.0


def periodic_trace(seasons: int, low: float, high: float, seed: int = 0) -> Trace:
    """Poisson arrivals at ``low`` req/s for the first half of each season and ``high`` for the second."""
    rng = np.random.default_rng(seed)
    times: list[float] = []
    t = 0.0
    while t < seasons * SEASON:
        rate = low if t % SEASON < SEASON / 2 else high
        t += float(rng.exponential(1.0 / rate))
        times.append(t)
    n = len(times)
    return make_trace("periodic", np.asarray(times), rng.integers(64, 320, n), rng.integers(8, 64, n))


def test_the_simulator_runs_the_predictive_floor_and_shows_its_forecast() -> None:
    trace = periodic_trace(3, 3.0, 30.0)
    comparison = compare(trace, small_profile(), ["shoal", "shoal-predictive"], replicas_max=12, season_seconds=SEASON)
    reactive, predictive = comparison.runs["shoal"], comparison.runs["shoal-predictive"]
    for run in (reactive, predictive):
        served = int(np.isfinite(run.finish).sum())
        assert served + len(run.dropped) + run.in_flight == len(trace)
    early = [d for d in predictive.decisions if d.time < SEASON]
    late = [d for d in predictive.decisions if d.time > SEASON + 60]
    assert early and all("forecast: insufficient history" in d.message for d in early)
    assert late and all(d.values.get("forecast_rps") is not None for d in late)
    assert any(d.rule == "ScaleUpForecast" for d in late)
    assert not any(d.rule.endswith("Forecast") for d in reactive.decisions)
    assert comparison.results["shoal-predictive"]["slo_attainment"] is not None
