"""Properties of ShoalPolicy over arbitrary configurations and observation sequences (hypothesis).

The sequences are closed loops: each observation's ``desired`` is the policy's previous decision, as the operator
and the simulator apply it, while load, latency, missing data, alerts and loading replicas vary freely.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from fleets import FluidFleet, observe, reversals
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shoal.autoscale import AutoscalingConfig, FleetSignals, ReplicaSignals, ScalingDecision, ShoalPolicy
from shoal.autoscale.capacity import CapacityEstimate

SCALE_DOWN_RULES = {"ScaleDown", "ScaleToZero"}


@st.composite
def configs(draw: st.DrawFn, min_replicas: int | None = None) -> AutoscalingConfig:
    low = draw(st.integers(0, 3)) if min_replicas is None else min_replicas
    return AutoscalingConfig(
        min_replicas=low,
        max_replicas=draw(st.integers(max(low, 1), 24)),
        queue_depth_per_replica=draw(st.floats(0.5, 16)),
        ttft_p95_seconds=draw(st.floats(0.2, 10)),
        scale_up_stabilization_seconds=draw(st.sampled_from([0.0, 0.0, 5.0, 30.0])),
        scale_down_stabilization_seconds=draw(st.sampled_from([0.0, 30.0, 120.0, 300.0])),
        max_step=draw(st.integers(1, 6)),
        tolerance=draw(st.floats(0.0, 0.3)),
        target_utilization=draw(st.floats(0.5, 1.0)),
    )


@dataclass(frozen=True)
class Moment:
    """What happens in one observation besides the count: the load and what the source could see."""

    gap: float
    waiting: float
    running: float
    ttft: float | None
    arrival: float | None
    starting: int
    unreported: int
    missing: str | None
    alert: bool
    held: int
    limit: float | None = None  # the replicas' batch limit (None: engines that do not export it)

    def signals(self, time: float, desired: int) -> FleetSignals:
        starting = min(self.starting, desired)
        ready = desired - starting
        return observe(
            time,
            desired,
            starting=starting,
            waiting=self.waiting if ready else 0.0,
            running=self.running if ready else 0.0,
            ttft=self.ttft,
            arrival=self.arrival,
            unreported=min(self.unreported, ready),
            missing=self.missing,
            alert_firing=self.alert,
            held_requests=self.held if desired == 0 else 0,
            max_num_seqs=self.limit,
        )


moments = st.builds(
    Moment,
    gap=st.sampled_from([1.0, 1.0, 2.0, 5.0, 15.0, 60.0]),
    waiting=st.one_of(st.just(0.0), st.floats(0, 200)),
    running=st.one_of(st.just(0.0), st.floats(0, 100)),
    ttft=st.one_of(st.none(), st.floats(0, 30)),
    arrival=st.one_of(st.none(), st.just(0.0), st.floats(0, 100)),
    starting=st.sampled_from([0, 0, 0, 1, 2]),
    unreported=st.sampled_from([0, 0, 0, 0, 1]),
    missing=st.sampled_from([None] * 9 + ["prometheus: timed out after 2s"]),
    alert=st.sampled_from([False] * 9 + [True]),
    held=st.sampled_from([0, 0, 3]),
    limit=st.sampled_from([None, None, 16.0, 64.0, 256.0]),
)


def run_loop(policy: ShoalPolicy, start: int, sequence: list[Moment]) -> list[tuple[FleetSignals, ScalingDecision]]:
    """Feeds the sequence, applying each decision as the next observation's ``desired``."""
    time, desired, trail = 0.0, start, []
    for moment in sequence:
        time += moment.gap
        signals = moment.signals(time, desired)
        decision = policy.decide(signals)
        trail.append((signals, decision))
        desired = decision.replicas
    return trail


@st.composite
def loops(draw: st.DrawFn) -> tuple[AutoscalingConfig, int, list[Moment]]:
    config = draw(configs())
    start = draw(st.integers(config.min_replicas, config.max_replicas))
    return config, start, draw(st.lists(moments, min_size=1, max_size=120))


@settings(max_examples=300, deadline=None)
@given(loops())
def test_every_decision_stays_in_bounds_moves_at_most_max_step_and_names_its_rule(
    loop: tuple[AutoscalingConfig, int, list[Moment]],
) -> None:
    """maxStep bounds every move except a panic scale-up: a breach sized from rates the policy measured."""
    config, start, sequence = loop
    for signals, decision in run_loop(ShoalPolicy(config), start, sequence):
        assert config.min_replicas <= decision.replicas <= config.max_replicas
        assert signals.desired - decision.replicas <= config.max_step
        if decision.replicas - signals.desired > config.max_step:
            values = decision.values
            assert "panic: past maxStep" in decision.message and decision.rule.startswith("ScaleUp"), decision
            assert values["capacity_per_replica"] is not None or values["capacity_floor"] is not None
            assert values["waiting"] and values["arrival_rate"] is not None
        assert decision.rule and decision.message and decision.time == signals.time


@settings(max_examples=300, deadline=None)
@given(loops())
def test_never_scales_down_on_missing_data_under_an_alert_or_while_a_replica_loads(
    loop: tuple[AutoscalingConfig, int, list[Moment]],
) -> None:
    config, start, sequence = loop
    for signals, decision in run_loop(ShoalPolicy(config), start, sequence):
        partial = any(r.phase == "ready" and r.waiting is None for r in signals.replicas)
        loading = any(r.phase == "starting" for r in signals.replicas)
        if signals.missing or partial or signals.alert_firing or loading:
            assert decision.replicas >= signals.desired, (signals, decision)


@settings(max_examples=300, deadline=None)
@given(loops())
def test_no_second_scale_up_for_the_same_breach_while_replicas_load(
    loop: tuple[AutoscalingConfig, int, list[Moment]],
) -> None:
    """With replicas loading only a higher arrival rate (a new breach) may add more; queue and TTFT may not."""
    config, start, sequence = loop
    for signals, decision in run_loop(ShoalPolicy(config), start, sequence):
        if any(r.phase == "starting" for r in signals.replicas) and decision.replicas > signals.desired:
            assert decision.rule == "ScaleUpRate", decision


@settings(max_examples=300, deadline=None)
@given(loops())
def test_scale_down_waits_a_full_window_after_a_restart_and_after_any_scale_up(
    loop: tuple[AutoscalingConfig, int, list[Moment]],
) -> None:
    config, start, sequence = loop
    window = config.scale_down_stabilization_seconds
    trail = run_loop(ShoalPolicy(config), start, sequence)
    first = trail[0][0].time
    last_up: float | None = None
    for signals, decision in trail:
        if decision.replicas < signals.desired:
            assert decision.rule in SCALE_DOWN_RULES
            assert signals.time - first >= window
            assert last_up is None or signals.time - last_up >= window
        elif decision.replicas > signals.desired:
            last_up = signals.time


@st.composite
def load_pairs(draw: st.DrawFn) -> tuple[Moment, Moment]:
    """Two observations differing only in load, the second at least as loaded in every signal."""
    low = draw(moments)
    more = draw(st.tuples(*(st.floats(0, 50) for _ in range(4))))
    ttft = draw(st.floats(0, 30))
    arrival = draw(st.floats(0, 100))
    low = replace(low, ttft=ttft, arrival=arrival)
    high = replace(
        low,
        waiting=low.waiting + more[0],
        running=low.running + more[1],
        ttft=ttft + more[2],
        arrival=arrival + more[3],
    )
    return low, high


@settings(max_examples=400, deadline=None)
@given(loops(), load_pairs())
def test_more_load_never_gets_fewer_replicas(
    loop: tuple[AutoscalingConfig, int, list[Moment]], pair: tuple[Moment, Moment]
) -> None:
    """After the same history, a more loaded observation is answered with at least as many replicas."""
    config, start, sequence = loop
    policy = ShoalPolicy(config)
    trail = run_loop(policy, start, sequence)
    time, desired = trail[-1][0].time + pair[0].gap, trail[-1][1].replicas
    twin = copy.deepcopy(policy)
    low, high = pair
    assert policy.decide(low.signals(time, desired)).replicas <= twin.decide(high.signals(time, desired)).replicas


@settings(max_examples=12, deadline=None)
@given(rate=st.floats(0.5, 30), capacity=st.floats(0.5, 5), startup=st.floats(5, 180), seed=st.integers(0, 2**16))
def test_steady_noisy_load_settles_without_flapping(rate: float, capacity: float, startup: float, seed: int) -> None:
    """Poisson arrivals at a constant rate: after settling, at most one direction reversal per 10 minutes."""
    config = AutoscalingConfig(min_replicas=1, max_replicas=100, max_step=10)
    fleet = FluidFleet(capacity=capacity, startup=startup, seed=seed)
    counts = fleet.run(ShoalPolicy(config), rate, 3600)
    settled = counts[1200:]
    assert reversals(settled) <= len(settled) / 600
    # burst memory may keep what a cold start from one replica needed (its noisiest arrival rate): 3x, at most
    assert counts[-1] <= 3 * rate / (capacity * config.target_utilization) + 4


@settings(max_examples=100, deadline=None)
@given(config=configs(min_replicas=0), start=st.integers(1, 24), held=st.integers(1, 50))
def test_idle_fleet_goes_to_zero_after_its_window_and_comes_back_for_held_requests(
    config: AutoscalingConfig, start: int, held: int
) -> None:
    start = min(start, config.max_replicas)
    policy, desired, time = ShoalPolicy(config), start, 0.0
    while desired > 0:
        decision = policy.decide(observe(time, desired, arrival=0.0, ttft=None))
        if decision.replicas < desired:
            assert time >= config.scale_down_stabilization_seconds
        desired = decision.replicas
        time += 1.0
        assert time <= config.scale_down_stabilization_seconds + 24 + 1
    assert policy.decide(observe(time, 0, ttft=None, arrival=None)).replicas == 0
    woken = policy.decide(observe(time + 1, 0, ttft=None, arrival=None, held_requests=held))
    assert 1 <= woken.replicas <= config.max_step
    assert woken.rule == "ScaleFromZero"


@settings(max_examples=100, deadline=None)
@given(
    waiting=st.integers(1, 50),
    running=st.floats(1, 200),
    gap=st.sampled_from([1.0, 2.0, 10.0]),
    arrivals=st.lists(st.floats(1, 100), min_size=5, max_size=200),
)
def test_a_queue_that_never_grows_never_sets_the_capacity(
    waiting: int, running: float, arrivals: list[float], gap: float
) -> None:
    """Full batches over a queue of constant size only show the replicas kept up: a lower bound, never the
    capacity the rate rule sizes by (whatever the arrival rates reported)."""
    policy = ShoalPolicy(AutoscalingConfig(max_replicas=8))
    for i, arrival in enumerate(arrivals):
        policy.decide(observe(i * gap, desired=2, waiting=2.0 * waiting, running=running, arrival=arrival, ttft=0.5))
    assert policy.capacity.per_replica is None


@settings(max_examples=100, deadline=None)
@given(
    config=configs(),
    ready=st.integers(1, 6),
    stuck=st.integers(1, 3),
    late=st.floats(0, 3600),
    per_ready=st.floats(0, 50),
)
def test_a_replica_past_its_start_up_timeout_never_holds_a_scale_up(
    config: AutoscalingConfig, ready: int, stuck: int, late: float, per_ready: float
) -> None:
    """The same queue breach with the same ready replicas gets the same count added whether the other replicas
    never existed or are stuck starting: stuck ones are neither capacity nor on their way."""
    now = config.startup_timeout_seconds + late + 1.0
    desired = min(ready + stuck, config.max_replicas)
    ready = min(ready, desired)
    stuck = desired - ready
    assume(ready >= config.min_replicas)  # else the bounds rule, not the breach, answers the fleet without them

    def breach(policy: ShoalPolicy, with_stuck: bool) -> int:
        replicas = tuple(ReplicaSignals(f"r{i}", "ready", 0.0, waiting=per_ready, running=1.0) for i in range(ready))
        if with_stuck:
            replicas += tuple(ReplicaSignals(f"s{i}", "starting", 0.0) for i in range(stuck))
        count = desired if with_stuck else ready
        decision = policy.decide(
            FleetSignals(
                time=now, desired=count, replicas=replicas, ttft_p95_seconds=1.0, arrival_rate=None, alert_firing=True
            )
        )
        return decision.replicas - count

    assert breach(ShoalPolicy(config), True) >= min(breach(ShoalPolicy(config), False), config.max_replicas - desired)


@settings(max_examples=200, deadline=None)
@given(
    ready=st.integers(1, 6),
    stretches=st.lists(st.tuples(st.floats(10, 300), st.floats(0.7, 1.0)), min_size=1, max_size=4),
    saturated_first=st.booleans(),
)
def test_full_batches_keep_the_capacity_between_what_they_serve_and_that_over_occupancy(
    ready: int, stretches: list[tuple[float, float]], saturated_first: bool
) -> None:
    """Whatever came before (a saturation measurement, other near-full stretches, the floor they raise), a 10 s
    stretch of batches at least 70% full with no queue leaves the estimate within [served, served / occupancy]
    per replica: Little's law's bound, and what the replicas were seen to serve."""
    capacity, time = CapacityEstimate(), 0.0
    if saturated_first:  # a queue growing by 20 a second over 40 req/s arriving: 20 served
        for t in range(11):
            capacity.observe(float(t), ready, ready + 20.0 * t, 40.0, within_slo=False, saturated=True, occupancy=1.0)
        time = 20.0
    for arrival, occupancy in stretches:
        for t in range(11):
            capacity.observe(time + t, ready, 0.0, arrival, within_slo=True, saturated=False, occupancy=occupancy)
        time += 20.0
    arrival, occupancy = stretches[-1]
    served = arrival / ready
    estimate = capacity.per_replica
    assert estimate is not None
    assert served * (1 - 1e-9) <= estimate <= served / occupancy * (1 + 1e-9)
