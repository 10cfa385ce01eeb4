"""Each rule of ShoalPolicy's control law fires where it should, and says which values it saw."""

from __future__ import annotations

import dataclasses
import math

import pytest
from fleets import FluidFleet, observe

from shoal.autoscale import AutoscalingConfig, FleetSignals, ReplicaSignals, ShoalPolicy
from shoal.autoscale.capacity import CapacityEstimate

CONFIG = AutoscalingConfig(
    min_replicas=1,
    max_replicas=10,
    queue_depth_per_replica=4.0,
    ttft_p95_seconds=2.0,
    scale_down_stabilization_seconds=300.0,
    max_step=3,
)


def test_queue_breach_scales_up_in_proportion_capped_by_max_step() -> None:
    policy = ShoalPolicy(CONFIG)
    decision = policy.decide(observe(0.0, desired=2, waiting=16.0, arrival=None))  # 8 per replica: twice the target
    assert (decision.replicas, decision.rule) == (4, "ScaleUpQueue")
    assert "queue 8 per ready replica > target 4" in decision.message and "2 -> 4" in decision.message
    assert decision.values["queue_per_ready"] == 8.0

    capped = ShoalPolicy(CONFIG).decide(observe(0.0, desired=2, waiting=80.0, arrival=None))
    assert (capped.replicas, capped.rule) == (5, "ScaleUpQueue")


def test_ttft_breach_scales_up_only_while_every_replica_queues() -> None:
    queued = ShoalPolicy(CONFIG).decide(observe(0.0, desired=2, waiting=2.0, ttft=5.0, arrival=None))
    assert (queued.replicas, queued.rule) == (3, "ScaleUpTTFT")  # latency alone: one more, then look again
    assert "TTFT P95 5s > target 2s" in queued.message

    # a slow first token with nothing queued is not a lack of replicas (or a latency window still catching up)
    idle_queue = ShoalPolicy(CONFIG).decide(observe(0.0, desired=2, waiting=0.0, running=3.0, ttft=5.0, arrival=None))
    assert idle_queue.replicas == 2


def test_starting_replicas_count_as_capacity_on_the_way() -> None:
    policy = ShoalPolicy(CONFIG)
    first = policy.decide(observe(0.0, desired=2, waiting=16.0, arrival=None))
    assert first.replicas == 4
    # the queue keeps growing while the two new replicas load: the same breach, no second scale-up
    for second in range(1, 60):
        held = policy.decide(
            observe(float(second), desired=4, starting=2, waiting=16.0 + second, ttft=6.0, arrival=None)
        )
        assert (held.replicas, held.rule) == (4, "HoldStarting"), held
    assert "2 replicas are on their way" in held.message


def test_a_loading_replica_is_never_removed() -> None:
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=10, scale_down_stabilization_seconds=0.0))
    decision = policy.decide(observe(0.0, desired=3, starting=1, waiting=0.0, arrival=0.0, running=0.0))
    assert decision.replicas == 3
    assert decision.rule == "HoldStarting"


def test_missing_metrics_hold_the_size() -> None:
    policy = ShoalPolicy(CONFIG)
    decision = policy.decide(observe(0.0, desired=3, missing="prometheus: connection refused"))
    assert (decision.replicas, decision.rule) == (3, "HoldMissingMetrics")
    assert "connection refused" in decision.message


def test_partial_metrics_scale_up_on_what_is_seen_but_never_down() -> None:
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=10, scale_down_stabilization_seconds=0.0))
    up = policy.decide(observe(0.0, desired=3, unreported=1, waiting=20.0, arrival=None))  # 10 per reported replica
    assert up.rule == "ScaleUpQueue" and up.replicas == 5
    quiet = policy.decide(observe(1.0, desired=3, unreported=1, waiting=0.0, arrival=0.0))
    assert (quiet.replicas, quiet.rule) == (3, "HoldMissingMetrics")
    assert "1 of 3 ready replicas unreported" in quiet.message


def test_alert_scales_up_at_once_and_holds_scale_down() -> None:
    slow_up = AutoscalingConfig(
        min_replicas=1, max_replicas=10, scale_up_stabilization_seconds=30.0, scale_down_stabilization_seconds=0.0
    )
    waits = ShoalPolicy(slow_up)
    waits.decide(observe(0.0, desired=2, waiting=0.0, arrival=None))
    assert waits.decide(observe(7.0, desired=2, waiting=16.0, arrival=None)).rule == "HoldUpStabilization"
    alerted = ShoalPolicy(slow_up)
    alerted.decide(observe(0.0, desired=2, waiting=0.0, arrival=None))
    assert alerted.decide(observe(1.0, desired=2, waiting=16.0, arrival=None, alert_firing=True)).replicas == 4

    held = ShoalPolicy(slow_up)
    held.decide(observe(0.0, desired=4, arrival=0.0))
    decision = held.decide(observe(1.0, desired=4, arrival=0.0, alert_firing=True))
    assert (decision.replicas, decision.rule) == (4, "HoldAlert")

    blind = ShoalPolicy(slow_up).decide(observe(0.0, desired=2, missing="scrape timed out", alert_firing=True))
    assert (blind.replicas, blind.rule) == (3, "ScaleUpAlert")


def test_scale_down_waits_for_a_full_window_of_history_after_a_restart() -> None:
    policy = ShoalPolicy(CONFIG)
    rules = [policy.decide(observe(float(t), desired=4, arrival=0.0)).rule for t in range(0, 300, 10)]
    assert set(rules) == {"HoldWarmup"}
    decision = policy.decide(observe(300.0, desired=4, arrival=0.0))
    assert (decision.replicas, decision.rule) == (1, "ScaleDown")
    assert "idle" in decision.message and "4 -> 1" in decision.message


def test_scale_down_waits_out_the_stabilization_window_after_a_peak() -> None:
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=10, scale_down_stabilization_seconds=120.0))
    for t in range(200):
        policy.decide(observe(float(t), desired=4, arrival=0.0))
    assert policy.decide(observe(200.0, desired=4, waiting=40.0, arrival=None)).replicas == 4  # one look: noise
    assert policy.decide(observe(206.0, desired=4, waiting=40.0, arrival=None)).replicas == 6  # the panic window
    rules = {policy.decide(observe(float(t), desired=6, arrival=0.0)).rule for t in range(207, 326)}
    assert rules == {"HoldStabilization"}
    assert policy.decide(observe(327.0, desired=6, arrival=0.0)).rule == "ScaleDown"


def test_scale_to_zero_after_an_idle_window_and_back_on_held_requests() -> None:
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=0, max_replicas=4, scale_down_stabilization_seconds=60.0))
    decisions = [policy.decide(observe(float(t), desired=1, arrival=0.0, ttft=None)) for t in range(61)]
    assert decisions[-1].replicas == 0 and decisions[-1].rule == "ScaleToZero"
    assert all(d.replicas == 1 for d in decisions[:-1])
    assert policy.decide(observe(62.0, desired=0, ttft=None, arrival=None)).rule == "HoldAtZero"
    woken = policy.decide(observe(63.0, desired=0, ttft=None, arrival=None, held_requests=3))
    assert (woken.replicas, woken.rule) == (1, "ScaleFromZero")
    assert "3 held" in woken.message


def test_bounds_are_restored_first() -> None:
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=2, max_replicas=5))
    assert policy.decide(observe(0.0, desired=1)).rule == "ScaleToMin"
    assert policy.decide(observe(1.0, desired=9)).replicas == 5


def test_capacity_is_learned_at_saturation_and_sizes_the_fleet_to_the_arrival_rate() -> None:
    config = AutoscalingConfig(min_replicas=1, max_replicas=40, target_utilization=0.8)  # maxStep: the default 2
    policy, fleet = ShoalPolicy(config), FluidFleet(capacity=5.0, startup=30.0, seed=3)
    fleet.run(policy, 10.0, 600)
    assert policy.capacity.per_replica == pytest.approx(5.0, rel=0.2)
    before = fleet.desired
    # a 3x step: within 10 s one decision sized by the arrival rate reaches 90% of what the new rate needs at the
    # fleet's real capacity, past maxStep (panic: the breach has measured rates to size by)
    fleet.run(policy, 30.0, 20, start=600.0)
    final = math.ceil(30.0 / (5.0 * 0.8))
    ups = [d for d in fleet.decisions[600:610] if d.replicas >= 0.9 * final]
    assert ups and ups[0].rule in {"ScaleUpRate", "ScaleUpQueue", "ScaleUpTTFT"}, fleet.decisions[600:610]
    assert ups[0].replicas - before > config.max_step and "panic: past maxStep 2" in ups[0].message


def test_a_queue_breach_without_a_measured_rate_moves_at_most_max_step() -> None:
    """Before any rate is known the queue's proportion is a guess: maxStep bounds it."""
    decision = ShoalPolicy(AutoscalingConfig(max_replicas=40)).decide(observe(0.0, desired=2, waiting=400.0))
    assert (decision.replicas, decision.rule) == (4, "ScaleUpQueue") and "panic" not in decision.message


def test_a_queue_breach_is_sized_on_the_rate_served_without_a_queue_before_capacity_is_measured() -> None:
    """A fleet that served 10 req/s on 2 replicas without a queue serves 4 each at least (the 10 s readings' lower
    confidence bound, 10 - 2 * sqrt(10 * 10) / 10 = 8 req/s: a reading at face value lets arrival noise lift the
    largest of them past the capacity): 30 req/s plus the backlog needs 8."""
    policy = ShoalPolicy(AutoscalingConfig(max_replicas=40))
    for t in range(30):
        policy.decide(observe(float(t), desired=2, running=4.0, arrival=10.0))
    assert policy.capacity.per_replica is None and policy.capacity.floor == pytest.approx(4.0)
    policy.decide(observe(30.0, desired=2, waiting=40.0, running=8.0, arrival=30.0))  # one look: noise
    decision = policy.decide(observe(36.0, desired=2, waiting=40.0, running=8.0, arrival=30.0))  # the panic window
    assert (decision.replicas, decision.rule) == (8, "ScaleUpQueue"), decision  # (30 + 40 / 60) / 4, rounded up
    assert "served without a queue" in decision.message and "panic" in decision.message


def test_a_backlog_is_worked_off_over_the_start_up_the_fleet_has_seen() -> None:
    """Replicas asked for now serve only once loaded. Where one took 180 s from starting to ready, a queue of 480
    on 2 replicas serving at least 4 req/s each, with 30 req/s arriving, needs (30 + 480 / 180) / 4 -> 9; a
    fleet that has seen no start-up works it off over a minute: (30 + 480 / 60) / 4 -> 10."""
    seen = ShoalPolicy(AutoscalingConfig(max_replicas=40))
    seen.decide(FleetSignals(-400.0, desired=1, replicas=(ReplicaSignals("n", "starting", -400.0),)))
    seen.decide(FleetSignals(-220.0, desired=1, replicas=(ReplicaSignals("n", "ready", -220.0),)))
    fresh = ShoalPolicy(AutoscalingConfig(max_replicas=40))
    for policy, replicas, drain in ((fresh, 10, 60), (seen, 9, 180)):
        for t in range(30):
            policy.decide(observe(float(t), desired=2, running=4.0, arrival=10.0))
        policy.decide(observe(30.0, desired=2, waiting=480.0, running=8.0, arrival=30.0))
        decision = policy.decide(observe(36.0, desired=2, waiting=480.0, running=8.0, arrival=30.0))
        assert (decision.replicas, decision.rule) == (replicas, "ScaleUpQueue"), decision
        assert f"plus the backlog over {drain}s" in decision.message
        assert decision.values["startup_seconds"] == (None if policy is fresh else 180.0)


def test_a_full_batch_whose_queue_keeps_its_size_is_a_lower_bound_not_the_capacity() -> None:
    """One request waiting on every replica at every look, served as fast as it arrives: the replicas kept up,
    which says nothing of how much more they could serve (the Azure conv trace's second replica)."""
    policy = ShoalPolicy(AutoscalingConfig(max_replicas=4))
    for t in range(120):
        decision = policy.decide(observe(float(t), desired=1, waiting=1.0, running=8.0, arrival=7.0))
        assert decision.replicas == 1, decision
    lower = 7.0 - 2 * math.sqrt(7.0 * 10) / 10  # what 10 s of 7 req/s shows at least (two Poisson deviations)
    assert policy.capacity.per_replica is None and policy.capacity.floor == pytest.approx(lower, rel=0.05)


def test_a_replica_stuck_starting_stops_blocking_scale_ups_after_the_start_up_timeout() -> None:
    config = AutoscalingConfig(max_replicas=10, startup_timeout_seconds=600.0)
    policy = ShoalPolicy(config)
    stuck = ReplicaSignals("s0", "starting", 0.0)

    def look(time: float) -> FleetSignals:
        busy = tuple(ReplicaSignals(f"r{i}", "ready", 0.0, waiting=10.0, running=4.0) for i in range(2))
        return FleetSignals(time=time, desired=3, replicas=(*busy, stuck), ttft_p95_seconds=5.0, arrival_rate=None)

    assert policy.decide(look(590.0)).rule == "HoldStarting"  # still counts as capacity on its way
    decision = policy.decide(look(610.0))
    assert (decision.replicas, decision.rule) == (5, "ScaleUpQueue"), decision  # 2 ready * 10 / 4 = 5, +1 stuck
    assert "1 stuck starting for over 600s" in decision.message and decision.values["stuck"] == 1.0


@pytest.mark.parametrize(
    "bad",
    [
        {"min_replicas": 3, "max_replicas": 2},
        {"max_step": 0},
        {"tolerance": 1.0},
        {"target_utilization": 0.0},
        {"ttft_p95_seconds": 0.0},
    ],
)
def test_config_rejects_impossible_values(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="|".join(bad)):
        AutoscalingConfig(**bad)  # type: ignore[arg-type]


def test_batches_near_full_give_the_capacity_before_any_queue() -> None:
    """One replica serving a steady 20 req/s with its batch 78% full and nothing waiting serves close to what it
    can (Little's law: at most 20 / 0.78 req/s), so 20 req/s is taken as its capacity and the fleet is sized to
    the target utilization, 20 / (20 * 0.9) = 1.11 replicas: a second one, before any queue shows. An engine that
    does not say its batch limit leaves the capacity unknown, and nothing moves."""
    for limit in (256.0, None):
        policy = ShoalPolicy(AutoscalingConfig(max_replicas=4))
        decisions = [
            policy.decide(observe(float(t), desired=1, running=200.0, arrival=20.0, max_num_seqs=limit))
            for t in range(0, 30, 2)
        ]
        ups = [d for d in decisions if d.replicas > 1]
        if limit is None:
            assert policy.capacity.per_replica is None and not ups, ups
            continue
        assert policy.capacity.per_replica == pytest.approx(20.0)
        up = ups[0]
        assert (up.time, up.replicas, up.rule) == (10.0, 2, "ScaleUpRate"), up  # one measure_seconds stretch
        assert up.values["occupancy"] == pytest.approx(200 / 256) and up.values["waiting"] == 0.0
        assert "needs 1.11 replicas at 20 req/s each (served at 78% occupancy)" in up.message


def test_full_batches_cap_a_capacity_measured_too_high() -> None:
    """A saturated stretch measured 10 req/s; later the replica serves 5 req/s with its batch 80% full, so it
    cannot serve more than 6.25 (Little's law): the estimate comes down to that, and the floor with it."""
    capacity = CapacityEstimate()
    for t in range(11):  # 20 req/s arriving, the queue growing by 10 a second: 10 served
        capacity.observe(float(t), 1, 1.0 + 10 * t, 20.0, within_slo=False, saturated=True, occupancy=1.0)
    assert capacity.per_replica == pytest.approx(10.0) and capacity.basis == "measured at saturation"
    for t in range(20, 41):
        capacity.observe(float(t), 1, 0.0, 5.0, within_slo=True, saturated=False, occupancy=0.8)
    assert capacity.per_replica == pytest.approx(6.25) and capacity.basis == "served at 80% occupancy"
    assert capacity.floor is not None and capacity.floor <= 6.25


def test_a_consolidation_followed_by_a_breach_is_not_taken_again_at_that_load() -> None:
    """Capacity unknown: 3 -> 2 at 1.2 req/s, then a TTFT breach on 2 (read at 2.4 req/s, a noisy moment whose
    ceiling a calm stretch would lift): the fleet goes back to 3 and stays there under the same load."""
    config = AutoscalingConfig(min_replicas=1, max_replicas=10, scale_down_stabilization_seconds=60.0)
    policy = ShoalPolicy(config)
    decisions = [policy.decide(observe(float(t), desired=3, arrival=1.2, ttft=0.5)) for t in range(0, 61, 5)]
    assert decisions[-1].rule == "ScaleDown" and decisions[-1].replicas == 2
    breach = policy.decide(observe(70.0, desired=2, waiting=6.0, running=2.0, ttft=3.0, arrival=2.4))
    assert breach.replicas == 3
    later = [policy.decide(observe(float(t), desired=3, arrival=1.2, ttft=0.5)) for t in range(75, 600, 5)]
    assert {d.replicas for d in later} == {3}
    assert "0.6 req/s per replica that breached before" in later[-1].message
    assert policy.decide(observe(600.0, desired=3, arrival=0.6, ttft=0.5)).replicas == 3  # one look: the window
    quieter = [policy.decide(observe(float(t), desired=3, arrival=0.6, ttft=0.5)) for t in range(605, 700, 5)]
    assert quieter[-1].replicas == 2  # a lower load still consolidates


def test_a_breach_while_the_backlog_drains_sets_no_ceiling() -> None:
    """A TTFT window lags the queue: replicas that just joined still see the old backlog's latency. That breach
    says nothing of what they carry; one over a queue that grows does."""
    estimate = CapacityEstimate()
    for t, waiting in ((0.0, 40.0), (2.0, 30.0), (4.0, 20.0)):
        estimate.observe(t, 10, waiting, 6.0, within_slo=False, saturated=True)
    estimate.breached(10, 6.0)
    assert estimate.ceiling == math.inf
    for t, waiting in ((6.0, 22.0), (8.0, 26.0), (10.0, 30.0), (12.0, 34.0)):
        estimate.observe(t, 10, waiting, 6.0, within_slo=False, saturated=True)
    estimate.breached(10, 6.0)
    assert estimate.ceiling == pytest.approx(0.6)


def test_a_cold_start_backlog_does_not_hold_the_fleet_at_its_peak() -> None:
    """One replica meeting twice its capacity: the queue's proportion asks for 10, and the backlog's lagging TTFT
    on those 10 once held them (and an 11th) for the whole hour where 3 serve the load (hypothesis found it)."""
    config = AutoscalingConfig(min_replicas=1, max_replicas=100, max_step=10)
    counts = FluidFleet(capacity=3.0, startup=8.0, seed=8).run(ShoalPolicy(config), 6.0, 3600)
    assert max(counts) >= 10
    assert counts[-1] <= math.ceil(6.0 / (3.0 * config.target_utilization)) + 1


def test_a_burst_back_as_large_finds_the_size_burst_memory_kept_and_a_larger_one_scales_up() -> None:
    """Burst memory keeps a burst's size at full capacity; the same burst back, read at the target utilization,
    once added a replica minutes in (the bursty preset's second burst, 130 s in). A larger burst still scales up."""
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=10))
    fleet = FluidFleet(capacity=10.0, startup=60.0, desired=2, poisson=False)
    fleet.run(policy, 8.0, 600)
    fleet.run(policy, 38.0, 300, start=600.0)  # 2 replicas meet nearly 5x their load: the queue outgrows start-up
    assert policy.capacity.per_replica == pytest.approx(10.0)
    counts = fleet.run(policy, 8.0, 1500, start=900.0)
    assert counts[-1] == 4  # what burst memory keeps: 38 req/s at 10 each, rounded up
    back = fleet.run(policy, 39.8, 300, start=2400.0)  # 4 serve it, but 39.8 / (10 * 0.9) = 4.42 > 4 * 1.1
    assert set(back) == {4}, [d.message for d in fleet.decisions[2400:] if d.replicas != 4]
    assert any("remembered burst of 38 req/s, which 4 serve at full capacity" in d.message for d in fleet.decisions)
    larger = fleet.run(policy, 50.0, 20, start=2700.0)  # over the burst remembered: sized on the rate as before
    assert larger[10] == math.ceil(50.0 / (10.0 * 0.9)), [d.message for d in fleet.decisions[-20:]]


def test_without_burst_memory_the_fleet_sheds_a_burst_once_its_load_is_gone() -> None:
    """``burstMemorySeconds: 0`` (bursts that do not recur): the same burst as above, and after it the fleet goes
    back to what the calm load needs within the scale-down window instead of keeping the burst's 4."""
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=10, burst_memory_seconds=0))
    fleet = FluidFleet(capacity=10.0, startup=60.0, desired=2, poisson=False)
    fleet.run(policy, 8.0, 600)
    assert max(fleet.run(policy, 38.0, 300, start=600.0)) >= 4
    counts = fleet.run(policy, 8.0, 1500, start=900.0)
    assert counts[-1] == 1, [d.message for d in fleet.decisions[900:] if d.rule.startswith("Scale")]
    assert not any("burst" in d.message for d in fleet.decisions[900:])


def test_a_burst_memory_that_runs_out_lets_the_fleet_down_at_once_not_a_window_later() -> None:
    """Burst memory is a floor over the stabilized count, not a recommendation in the scale-down window: the window
    holds what the load needed, so once the memory runs out the fleet goes to that within a few decisions."""
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=10, burst_memory_seconds=600))
    fleet = FluidFleet(capacity=10.0, startup=60.0, desired=2, poisson=False)
    fleet.run(policy, 8.0, 600)
    fleet.run(policy, 38.0, 300, start=600.0)
    counts = fleet.run(policy, 8.0, 1500, start=900.0)
    kept_until = 900 + 600 + 10  # renewed by the last observation at the burst's level, the 10 s rate lagging
    assert min(counts[: 1500 - 900]) == 4  # kept while remembered
    down = [d for d in fleet.decisions if d.time > 900 and d.rule == "ScaleDown" and d.replicas < 4]
    assert down and down[0].time <= kept_until + 30, [(d.time, d.message) for d in down]
    assert counts[kept_until + 60 - 900] == 1


def _measured_capacity(policy: ShoalPolicy) -> float:
    """Two ready replicas whose queue grows 2 req/s under 6 req/s of arrivals: each serves 2 req/s."""
    for i in range(10):
        policy.decide(observe(2.0 * i, desired=2, waiting=10.0 + 4 * i, arrival=6.0, ttft=5.0))
    assert policy.capacity.per_replica == pytest.approx(2.0, rel=0.05)
    return 20.0


def test_a_latency_breach_without_queues_names_its_hold_and_what_releases_it() -> None:
    policy = ShoalPolicy(CONFIG)
    now = _measured_capacity(policy)
    for t in range(int(now), int(now) + 120, 2):  # TTFT P95 at 4x target for two minutes, no replica queueing
        decision = policy.decide(observe(float(t), desired=2, waiting=1.0, arrival=3.0, ttft=8.0))
        assert (decision.replicas, decision.rule) == (2, "HoldNoQueue")
    assert "TTFT P95 8s > target 2s, but 2 of 2 ready replicas have no request waiting" in decision.message
    assert "released when every ready replica queues" in decision.message


@pytest.mark.parametrize(("most", "release"), [(10, "or scales up as soon as the queue grows"), (2, "a higher max")])
def test_a_backlog_the_replicas_work_off_is_held_and_says_what_releases_it(most: int, release: str) -> None:
    """At replicas.max a growing queue cannot scale up, so the hold must not promise it (issue 33's overload)."""
    policy = ShoalPolicy(dataclasses.replace(CONFIG, max_replicas=most))
    now = _measured_capacity(policy)
    decision = policy.decide(observe(now + 2, desired=2, waiting=20.0, arrival=3.0, ttft=5.0))
    assert (decision.replicas, decision.rule) == (2, "HoldDraining")
    assert "2 replicas drain it within" in decision.message and release in decision.message


def test_a_breach_at_max_is_held_as_at_max_not_as_stabilization() -> None:
    policy = ShoalPolicy(CONFIG)
    decision = policy.decide(observe(0.0, desired=10, waiting=400.0, arrival=None))
    assert (decision.replicas, decision.rule) == (10, "HoldAtMax")
    assert "10 is replicas.max; a higher max releases it" in decision.message


def test_every_decision_says_how_long_the_breach_has_lasted() -> None:
    policy = ShoalPolicy(CONFIG)
    assert policy.decide(observe(0.0, desired=10, waiting=400.0, arrival=None)).values["breach_seconds"] == 0.0
    assert policy.decide(observe(8.0, desired=10, waiting=400.0, arrival=None)).values["breach_seconds"] == 8.0
    assert policy.decide(observe(10.0, desired=10, waiting=0.0, arrival=None)).values["breach_seconds"] == 0.0
