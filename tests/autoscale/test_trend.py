"""The arrival trend: a line's projection one start-up ahead, trusted only on a line that surely rises."""

from __future__ import annotations

import math
import random

from fleets import FluidFleet
from hypothesis import given
from hypothesis import strategies as st

from shoal.autoscale import AutoscalingConfig, ScalingDecision, ShoalPolicy
from shoal.autoscale.trend import BIN_S, MIN_BINS, WINDOW_S, ArrivalTrend, fit_line


def _fed(rate: object, seconds: int, every: float = 10.0) -> ArrivalTrend:
    trend = ArrivalTrend()
    t = 0.0
    while t < seconds:
        trend.observe(t, rate(t))  # type: ignore[operator]
        t += every
    return trend


def test_fit_line_recovers_a_line_and_scores_its_residuals() -> None:
    line = fit_line([(0.0, 1.0), (10.0, 2.0), (20.0, 3.0), (30.0, 4.0)])
    assert line.slope == 0.1 and line.at(40.0) == 5.0 and line.slope_se == 0.0
    assert fit_line([(0.0, 1.0), (10.0, 2.0)]).slope_se == math.inf
    noisy = fit_line([(float(t), 5.0 + (1 if t % 2 else -1)) for t in range(10)])
    assert abs(noisy.slope) < noisy.slope_se


def test_a_rising_line_is_projected_ahead_on_its_lower_bound() -> None:
    rng = random.Random(3)
    trend = _fed(lambda t: 20.0 + 0.05 * t + rng.gauss(0, 1.0), 900)
    projection = trend.project(900.0, 240.0)
    assert projection is not None
    assert 0 < projection.slope_floor < projection.slope
    assert abs(projection.slope - 0.05) < 0.01
    # the true line at 1140 s is 77 req/s; the lower bound projects a little under it, never over by much
    assert 70.0 < projection.rate < 78.0


def test_no_trend_before_enough_bins_and_the_filling_bin_is_left_out() -> None:
    trend = _fed(lambda t: 10.0 + t, MIN_BINS * BIN_S)  # exactly MIN_BINS bins, the last still filling
    assert trend.project(MIN_BINS * BIN_S, 60.0) is None
    trend.observe(MIN_BINS * BIN_S, 10.0 + MIN_BINS * BIN_S)  # the fifth bin completes
    assert trend.project(MIN_BINS * BIN_S, 60.0) is not None


def test_a_step_is_no_trend() -> None:
    # flat, then three times the rate: the panic rules answer a step; extending its slope would count it twice
    rng = random.Random(5)
    trend = _fed(lambda t: (10.0 if t < 420 else 30.0) + rng.gauss(0, 0.5), 600)
    assert trend.project(600.0, 240.0) is None


def test_flat_noise_projects_nothing_on_most_windows() -> None:
    rng = random.Random(11)
    trend, trusted = ArrivalTrend(), 0
    for i in range(int(4 * 3600 / 10)):
        trend.observe(i * 10.0, 50.0 + rng.gauss(0, 3.0))
        trusted += trend.project(i * 10.0, 240.0) is not None
    assert trusted < 0.05 * 4 * 3600 / 10


def test_old_bins_leave_the_window_and_missing_rates_are_skipped() -> None:
    # a climb long ago, flat for a whole window since: nothing projected
    trend = _fed(lambda t: t if t < 600 else (600.0 if t < 600 + WINDOW_S + BIN_S else None), 1400)
    assert trend.project(1400.0, 240.0) is None


@given(st.lists(st.floats(0.0, 1000.0), min_size=MIN_BINS + 1, max_size=20))
def test_a_rate_that_never_rises_never_projects(values: list[float]) -> None:
    # a non-increasing series has a least-squares slope <= 0 (Chebyshev's sum inequality), so no lower bound > 0
    trend = ArrivalTrend()
    falling = sorted(values, reverse=True)
    for i, value in enumerate(falling):
        trend.observe(i * BIN_S, value)
    assert trend.project(len(falling) * BIN_S, 240.0) is None


def test_the_policy_scales_a_ramp_ahead_and_holds_flat_load_still() -> None:
    # a 2 req/s replica loading 240 s; the rate climbs 0.01 req/s each second (0.6 a minute) from 4 req/s
    config = AutoscalingConfig(min_replicas=1, max_replicas=20)
    ramp = FluidFleet(capacity=2.0, startup=240.0, seed=2)
    ramp.run(ShoalPolicy(config), lambda t: 4.0 + 0.01 * max(t - 600.0, 0.0), 2400)
    trend_ups = [d for d in ramp.decisions if d.rule == "ScaleUpTrend"]
    assert trend_ups, {d.rule for d in ramp.decisions}
    first = trend_ups[0]
    # it comes before the load itself needs more: the demand today still fits the count within the tolerance
    sized, desired = first.values["sized_replicas"], first.values["desired"]
    assert sized is not None and desired is not None and sized <= desired * (1 + config.tolerance)
    assert first.values["trend_sized_replicas"] is not None and first.values["trend_sized_replicas"] > desired
    assert "one start-up ahead" in first.message
    flat = FluidFleet(capacity=2.0, startup=240.0, seed=2)
    flat.run(ShoalPolicy(config), 7.0, 3600)
    assert not [d for d in flat.decisions if d.rule == "ScaleUpTrend"]


def test_a_falling_line_is_trusted_on_its_upper_bound_and_never_projected() -> None:
    rng = random.Random(3)
    trend = _fed(lambda t: 80.0 - 0.05 * t + rng.gauss(0, 1.0), 900)
    falling = trend.falling()
    assert falling is not None and -0.06 < falling < 0
    assert trend.project(900.0, 240.0) is None
    rising = _fed(lambda t: 20.0 + 0.05 * t + rng.gauss(0, 1.0), 900)
    assert rising.falling() is None and rising.project(900.0, 240.0) is not None


def test_a_step_down_and_flat_noise_are_no_fall() -> None:
    rng = random.Random(5)
    assert _fed(lambda t: (30.0 if t < 420 else 10.0) + rng.gauss(0, 0.5), 600).falling() is None
    trend, trusted = ArrivalTrend(), 0
    for i in range(int(4 * 3600 / 10)):
        trend.observe(i * 10.0, 50.0 + rng.gauss(0, 3.0))
        trusted += trend.falling() is not None
    assert trusted < 0.05 * 4 * 3600 / 10


@given(st.lists(st.floats(0.0, 1000.0), min_size=MIN_BINS + 1, max_size=20))
def test_a_rate_that_never_falls_is_never_falling(values: list[float]) -> None:
    trend = ArrivalTrend()
    for i, value in enumerate(sorted(values)):
        trend.observe(i * BIN_S, value)
    assert trend.falling() is None


def _need(decision: ScalingDecision, tolerance: float) -> int:
    sized = decision.values.get("sized_replicas")
    return math.ceil(sized / (1 - tolerance)) if sized is not None else decision.replicas


def test_the_policy_follows_a_falling_load_within_a_minute_not_a_window() -> None:
    # up 0.01 req/s each second from 4 to 20 req/s, then down as fast; 2 req/s a replica, loading 120 s; no burst
    # memory, which would keep the size the climb outran start-up at (rule 6, tested on its own)
    config = AutoscalingConfig(min_replicas=1, max_replicas=20, burst_memory_seconds=0)

    def rate(t: float) -> float:
        return 4.0 + 0.01 * (min(t, 1600.0) - max(t - 1600.0, 0.0)) if t < 3200 else 4.0

    fleet = FluidFleet(capacity=2.0, startup=120.0, seed=4)
    counts = fleet.run(ShoalPolicy(config), rate, 3600)
    falls = [d for d in fleet.decisions if d.rule == "ScaleDown" and "falling" in d.message]
    assert falls and all(1600 < d.time < 3300 for d in falls), [(d.time, d.message) for d in falls]
    assert all(-0.011 < (d.values.get("trend_falling_rps_per_s") or 0) < 0 for d in falls)  # the bound it saw
    needs = [_need(d, config.tolerance) for d in fleet.decisions]
    # from the first scale-down on the trusted fall to the bottom: the count is within what the last 90 s needed,
    # where a full 300 s window keeps what the load needed up to five minutes ago (a replica more, on this slope)
    start = int(falls[0].time)
    late = [t for t in range(start, 3200) if counts[t] > max(needs[t - 90 : t + 1])]
    assert not late, late[:5]
    kept_by_window = sum(max(needs[t - 300 : t + 1]) for t in range(start, 3200))
    assert sum(counts[start:3200]) < kept_by_window - 300
    assert not [d for d in fleet.decisions[1600:3300] if d.rule.startswith("ScaleUp")]


def test_a_step_down_waits_the_whole_window() -> None:
    # 16 req/s on 6 replicas (the queue measures the capacity), then 6 req/s from 2400 s: a level that changed is
    # what the window rides out (the 10 s arrival rate takes that long to show the step)
    config = AutoscalingConfig(min_replicas=1, max_replicas=20, burst_memory_seconds=0)
    fleet = FluidFleet(capacity=2.0, startup=120.0, seed=6, desired=6)
    counts = fleet.run(ShoalPolicy(config), lambda t: 16.0 if t < 2400 else 6.0, 3600)
    needs = [_need(d, config.tolerance) for d in fleet.decisions]
    window = int(config.scale_down_stabilization_seconds)
    assert all(counts[t] >= max(needs[t - window : t + 1]) for t in range(2400, 2400 + window))
    downs = [d for d in fleet.decisions if d.rule == "ScaleDown" and d.time >= 2400]
    assert downs and downs[-1].replicas < 6 and downs[0].values["capacity_per_replica"] is not None
    assert not [d for d in fleet.decisions if "falling" in d.message]
