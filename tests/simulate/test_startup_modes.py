"""Start-up modes: a cold start takes the profile's range, a node-cached one a fraction of it, and a standby
pool's replica is routable seconds after the decision, its hours in the pool counted."""

from __future__ import annotations

import numpy as np
import pytest
from sim_fixtures import poisson_trace, small_profile

from shoal.autoscale import FleetSignals, ScalingDecision
from shoal.autoscale.startup import StartupTimes
from shoal.cli import main
from shoal.gateway.routing import RoundRobin
from shoal.simulate.compare import compare
from shoal.simulate.simulator import SimConfig, SimRun, simulate
from shoal.simulate.startup_modes import PROMOTE_S, StartupMode

DECISION_S = 10.0


class OneThenTwo:
    """One replica, two from ``DECISION_S`` on."""

    name = "one-then-two"
    period_seconds = 1.0

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        wanted = 2 if signals.time >= DECISION_S else 1
        return ScalingDecision(signals.time, wanted, "Test", f"{wanted} replicas")


def _run(startup: StartupMode, seed: int = 0) -> SimRun:
    config = SimConfig(seed=seed, initial_replicas=1, sample_s=0.25, tail_s=5.0, startup=startup)
    return simulate(poisson_trace(2.0, 240, seed=seed), small_profile(), OneThenTwo(), RoundRobin(), config)


def _second_ready_after_decision(run: SimRun) -> float:
    timeline = run.timeline
    return float(timeline[np.flatnonzero(timeline[:, 2] >= 2)[0], 0]) - DECISION_S


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_mode_starts_the_second_replica_in_its_own_time(seed: int) -> None:
    cold = _second_ready_after_decision(_run(StartupMode(), seed))
    cached = _second_ready_after_decision(_run(StartupMode("cached"), seed))
    standby = _second_ready_after_decision(_run(StartupMode("standby", standby=1), seed))
    assert 20.0 <= cold <= 40.5  # the profile's startup_s, (20, 40), and one sample
    assert 4.0 <= cached <= 8.5  # a fifth of it
    assert standby == pytest.approx(PROMOTE_S, abs=0.3)


def test_the_pool_is_paid_for_in_replica_hours() -> None:
    cold, pooled = _run(StartupMode()), _run(StartupMode("standby", standby=1))
    # the pool's first replica waited from the start to the decision, its refill from the decision to the end
    in_pool = sum(b - a for a, b in pooled.standby_spans)
    assert in_pool == pytest.approx(pooled.end_time)
    # what the pool adds to the fleet's seconds (the runs may end apart by a request's last steps, on 3 replicas)
    seconds = [sum(b - a for a, b in run.replica_spans) for run in (cold, pooled)]
    assert seconds[1] - seconds[0] == pytest.approx(in_pool, abs=3 * abs(cold.end_time - pooled.end_time) + 0.01)


def test_a_pool_still_loading_promotes_once_loaded() -> None:
    # Two scale-ups close together with a pool of one: the second waits for the refill's cold start.
    class OneThenThree(OneThenTwo):
        def __init__(self) -> None:
            self.startups = StartupTimes()

        def decide(self, signals: FleetSignals) -> ScalingDecision:
            self.startups.observe(signals.replicas)
            wanted = 3 if signals.time >= DECISION_S else 1
            return ScalingDecision(signals.time, wanted, "Test", f"{wanted} replicas")

    config = SimConfig(initial_replicas=1, sample_s=0.25, tail_s=5.0, startup=StartupMode("standby", standby=1))
    policy = OneThenThree()
    run = simulate(poisson_trace(2.0, 240), small_profile(), policy, RoundRobin(), config)
    timeline = run.timeline
    two = float(timeline[np.flatnonzero(timeline[:, 2] >= 2)[0], 0]) - DECISION_S
    three = float(timeline[np.flatnonzero(timeline[:, 2] >= 3)[0], 0]) - DECISION_S
    assert two == pytest.approx(PROMOTE_S, abs=0.3)
    assert 20.0 + PROMOTE_S <= three <= 40.0 + PROMOTE_S + 0.5
    # the third is reported starting from its creation (the refill, at the decision), as the operator reports a
    # pod, so a policy learns what a replica beyond the pool takes, not a promotion's 2 s
    assert policy.startups.longest is not None and policy.startups.longest >= 20.0


@pytest.mark.parametrize(
    ("mode", "standby", "message"),
    [
        ("standby", 0, "needs --standby"),
        ("cold", 2, "needs --startup-mode standby"),
        ("standby", -1, "must be >= 0"),
        ("warm", 0, "must be one of"),
    ],
)
def test_bad_modes_are_refused_naming_the_option(mode: str, standby: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StartupMode(mode, standby)  # type: ignore[arg-type]


def test_a_pool_above_the_most_replicas_is_refused() -> None:
    with pytest.raises(ValueError, match="--standby 5 is above the most replicas \\(4\\)"):
        compare(poisson_trace(1.0, 20), small_profile(), ["fixed"], replicas_max=4, startup=StartupMode("standby", 5))


def test_the_cli_reports_a_bad_pool_as_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--trace", "steady", "--startup-mode", "standby", "--no-progress", "--policies", "fixed"])
    assert code == 2
    assert "needs --standby" in capsys.readouterr().err
