"""ShoalPolicy's predictive floor: capacity held for the forecast arrival rate, never a count lowered by it."""

from __future__ import annotations

from dataclasses import replace

from fleets import FluidFleet, observe

from shoal.autoscale import AutoscalingConfig, FleetSignals, ShoalPolicy

SEASON = 1800.0
REACTIVE = AutoscalingConfig(min_replicas=1, max_replicas=12, target_utilization=0.8)
PREDICTIVE = replace(REACTIVE, predictive=True, season_seconds=SEASON)


def square_wave(t: float) -> float:
    """Each season: 4 req/s for its first half, 16 for its second."""
    return 16.0 if t % SEASON >= SEASON / 2 else 4.0


def _recorded(policy: ShoalPolicy, rate: object, seconds: int, startup: float = 120.0) -> list[FleetSignals]:
    """The signals a closed loop under ``policy`` produced, second by second."""
    fleet = FluidFleet(capacity=2.0, startup=startup, seed=1, poisson=False)
    signals = []
    for now in range(seconds):
        seen = fleet.step(float(now), rate(now))  # type: ignore[operator]
        signals.append(seen)
        fleet.apply(float(now), policy.decide(seen).replicas)
    return signals


def test_before_one_season_the_policy_is_the_reactive_one_and_says_so() -> None:
    reactive, predictive = ShoalPolicy(REACTIVE), ShoalPolicy(PREDICTIVE)
    for signals in _recorded(ShoalPolicy(REACTIVE), square_wave, int(SEASON) - 1):
        mine, theirs = predictive.decide(signals), reactive.decide(signals)
        assert (mine.replicas, mine.rule) == (theirs.replicas, theirs.rule)
        assert mine.message.endswith(
            f"; forecast: insufficient history ({signals.time:.0f} s of {SEASON:.0f} s), reactive only"
        )
        assert mine.values["forecast_history_seconds"] == signals.time
        assert "forecast_rps" not in mine.values
    assert predictive.name == "shoal-predictive" and reactive.name == "shoal"


def test_the_floor_only_raises_the_reactive_count() -> None:
    # the same observations to both: wherever the forecast is on, the predictive count is never below the reactive
    # one, and a scale-down stops at the floor (HoldForecast) rather than under what the load needs
    reactive, predictive = ShoalPolicy(REACTIVE), ShoalPolicy(PREDICTIVE)
    forecast_on = held = 0
    for signals in _recorded(ShoalPolicy(PREDICTIVE), square_wave, int(5 * SEASON)):
        mine, theirs = predictive.decide(signals), reactive.decide(signals)
        assert mine.replicas >= theirs.replicas, (mine, theirs)
        forecast_on += "forecast_floor" in mine.values
        held += mine.rule == "HoldForecast"
        if mine.rule in {"ScaleUpForecast", "HoldForecast"}:
            assert mine.values["forecast_floor"] is not None and mine.values["forecast_rps"] is not None
    assert forecast_on > 2 * SEASON and held > 0


def test_the_floor_has_the_peak_ready_before_it_arrives() -> None:
    # replicas take 120 s to load: the reactive policy meets each step with the trough's fleet; once it has seen a
    # season, the predictive one scales up a start-up ahead of the step
    seconds = int(5 * SEASON)
    fleet_r, fleet_p = FluidFleet(2.0, 120.0, 1, False), FluidFleet(2.0, 120.0, 1, False)
    counts_r = fleet_r.run(ShoalPolicy(REACTIVE), square_wave, seconds)
    counts_p = fleet_p.run(ShoalPolicy(PREDICTIVE), square_wave, seconds)
    step = int(4 * SEASON + SEASON / 2)  # the last season's rise to 16 req/s
    ahead = [d for d in fleet_p.decisions[step - 150 : step] if d.rule == "ScaleUpForecast"]
    assert ahead, [d.rule for d in fleet_p.decisions[step - 150 : step]]
    assert counts_p[step] > counts_r[step]
    assert counts_p[step] >= 16.0 / (2.0 * 0.8)  # the peak's fleet is there when it starts


def test_hours_of_nothing_arriving_decay_to_min_without_a_forecast_holding_replicas() -> None:
    config = replace(PREDICTIVE, min_replicas=0)
    policy, fleet = ShoalPolicy(config), FluidFleet(capacity=2.0, startup=60.0, seed=2, poisson=False)
    fleet.run(policy, square_wave, int(2 * SEASON))
    assert fleet.desired > 2 and policy.capacity.per_replica is not None
    fleet.run(policy, 0.0, 6 * 3600, start=2 * SEASON)
    assert fleet.desired == 0
    last = fleet.decisions[-1]
    assert last.values["forecast_rps"] == 0.0 and last.values["forecast_floor"] == 0.0


def test_at_zero_the_forecast_alone_brings_the_fleet_back_ahead_of_the_load() -> None:
    # quiet nights (nothing arrives: to zero) and busy days; the fluid fleet's queue at zero replicas is what the
    # gateway would hold
    policy = ShoalPolicy(replace(PREDICTIVE, min_replicas=0))
    fleet = FluidFleet(capacity=2.0, startup=60.0, seed=2, poisson=False)
    for now in range(int(4 * SEASON)):
        lam = 0.0 if now % SEASON < SEASON / 2 else 16.0
        signals = fleet.step(float(now), lam)
        if not signals.ready:
            signals = replace(signals, held_requests=int(fleet.queue))
        decision = policy.decide(signals)
        fleet.decisions.append(decision)
        fleet.apply(float(now), decision.replicas)
    rises = [d for d in fleet.decisions if d.rule == "ScaleUpForecast" and "at zero" in d.message]
    assert [d for d in fleet.decisions if d.rule == "ScaleToZero"]
    assert rises and all(d.time > SEASON and d.time % SEASON < SEASON / 2 for d in rises)  # ahead of the load


def test_no_capacity_no_floor() -> None:
    policy = ShoalPolicy(PREDICTIVE)
    decision = None
    for t in range(0, int(SEASON) + 20, 10):
        decision = policy.decide(observe(float(t), desired=2, arrival=3.0, running=2.0))
    assert decision is not None and policy.capacity.per_replica is None
    assert decision.values["forecast_rps"] == 3.0 and "forecast_floor" not in decision.values
    assert decision.message.endswith("capacity not yet known")
