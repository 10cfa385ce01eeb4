"""The peers' current laws (llm-d SLO and queue, Dynamo's planner, AIBrix's KPA): each one's published arithmetic
on hand-built signals, and properties over any load."""

from __future__ import annotations

import math

import pytest
from fleets import observe
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.autoscale import AutoscalingConfig
from shoal.autoscale.peer_laws import (
    AIBrixKPA,
    DynamoPlanner,
    LlmdQueue,
    LlmdSLO,
    RateLimits,
    holt_forecast,
    llmd_desired,
    llmd_score,
    trend_projection,
)

CONFIG = AutoscalingConfig(min_replicas=1, max_replicas=40)


def test_llmd_score_is_the_worse_latency_over_its_slo_capped_at_2() -> None:
    assert llmd_score(1.5, 0.02) == 0.5  # TTFT 1.5 / 3 beats TPOT 0.02 / 0.1
    assert llmd_score(0.3, 0.08) == pytest.approx(0.8)  # TPOT 0.08 / 0.1 beats TTFT 0.3 / 3
    assert llmd_score(30.0, 0.0) == 2.0
    assert llmd_score(None, None) == 0.0


def test_llmd_law_up_by_n_times_s_c_over_055_minus_1_down_by_n_times_1_minus_s_over_040() -> None:
    assert llmd_desired(4, 1.1, 1.0) == 4 + math.ceil(4 * (1.1 / 0.55 - 1))  # 8
    assert llmd_desired(4, 1.1, 0.5) == 4  # half the fleet still loading: 1.1 * 0.5 / 0.55 = 1
    assert llmd_desired(10, 0.2, 1.0) == 10 - math.floor(10 * (1 - 0.2 / 0.4))  # 5
    assert llmd_desired(10, 0.5, 1.0) == 10  # inside the band


def test_llmd_slo_averages_the_score_over_45_seconds() -> None:
    policy = LlmdSLO(CONFIG, ttft_slo_s=3.0)
    policy.decide(observe(0.0, 4, ttft_p90_seconds=6.0))  # score 2
    decision = policy.decide(observe(15.0, 4, ttft_p90_seconds=0.0))  # mean (2 + 0) / 2 = 1
    assert decision.values["score"] == 1.0
    later = policy.decide(observe(60.0, 4, ttft_p90_seconds=1.5))  # both earlier samples left the 45 s window
    assert later.values["score"] == 0.5


def test_llmd_slo_adds_at_most_max_of_100_percent_and_4_pods_per_60_seconds() -> None:
    policy = LlmdSLO(AutoscalingConfig(min_replicas=1, max_replicas=100), ttft_slo_s=3.0)
    first = policy.decide(observe(0.0, 2, ttft_p90_seconds=60.0))  # s = 2: wants 2 + ceil(2 * (2/0.55 - 1)) = 8
    assert first.replicas == 6  # +4 beats x2
    held = policy.decide(observe(15.0, 6, starting=4, ttft_p90_seconds=60.0))
    assert held.replicas == 6  # the 4 added in the last 60 s used the period's allowance
    assert policy.decide(observe(61.0, 6, ttft_p90_seconds=60.0)).replicas > 6


def test_llmd_slo_removes_one_pod_per_120_seconds_after_the_300_second_stabilization() -> None:
    policy = LlmdSLO(CONFIG, ttft_slo_s=3.0)
    assert policy.decide(observe(0.0, 10, ttft_p90_seconds=0.0)).replicas == 10  # the window remembers 10
    assert policy.decide(observe(301.0, 10, ttft_p90_seconds=0.0)).replicas == 9
    assert policy.decide(observe(316.0, 9, ttft_p90_seconds=0.0)).replicas == 9  # 1 pod per 120 s
    assert policy.decide(observe(422.0, 9, ttft_p90_seconds=0.0)).replicas == 8


def test_rate_limits_never_reverse_the_direction_asked() -> None:
    limits = RateLimits(4, 100.0, 60.0, 1, 120.0)
    assert limits.limit(0.0, 10, 3) == 9
    assert limits.limit(1.0, 9, 30) == 18  # from 9, +100%


def test_llmd_queue_takes_the_larger_of_waiting_over_1_and_running_over_16() -> None:
    policy = LlmdQueue(CONFIG)
    assert policy.decide(observe(0.0, 2, waiting=6.0, running=10.0)).replicas == 6  # ceil(6 / 1) beats 1
    policy = LlmdQueue(CONFIG)
    assert policy.decide(observe(0.0, 2, waiting=0.0, running=64.0)).replicas == 4  # ceil(64 / 16)


def test_llmd_queue_keeps_the_largest_recommendation_of_300_seconds_on_scale_down() -> None:
    policy = LlmdQueue(CONFIG)
    policy.decide(observe(0.0, 6, waiting=0.0, running=96.0))  # 6
    assert policy.decide(observe(200.0, 6, waiting=0.0, running=16.0)).replicas == 6
    assert policy.decide(observe(315.0, 6, waiting=0.0, running=16.0)).replicas == 1


def test_holt_forecast_follows_a_linear_trend_and_a_constant() -> None:
    assert holt_forecast([5.0, 5.0, 5.0]) == 5.0
    assert holt_forecast([float(v) for v in range(1, 40)]) == pytest.approx(40.0, abs=0.5)


def test_dynamo_floor_is_the_forecast_over_one_replicas_rate_every_180_seconds() -> None:
    policy = DynamoPlanner(CONFIG, replica_rps=2.0, ttft_sla_s=2.0)
    for t in range(0, 181, 5):
        decision = policy.decide(observe(float(t), 3, arrival=10.0, ttft=None, ttft_p90_seconds=1.5))
    assert decision.values["floor"] == 5.0  # ceil(10 / 2)
    assert decision.replicas == 5 and decision.rule == "Floor"


def test_dynamo_steps_one_replica_on_the_sla_and_waits_for_starting_replicas() -> None:
    policy = DynamoPlanner(CONFIG, replica_rps=2.0, ttft_sla_s=2.0)
    assert policy.decide(observe(0.0, 3, ttft_p90_seconds=2.5)).replicas == 4
    assert policy.decide(observe(5.0, 4, starting=1, ttft_p90_seconds=2.5)).replicas == 4
    assert policy.decide(observe(10.0, 4, tpot_p90_seconds=0.2, ttft_p90_seconds=0.1)).replicas == 5  # ITL over
    assert policy.decide(observe(15.0, 5, ttft_p90_seconds=0.5, tpot_p90_seconds=0.01)).replicas == 4


def test_trend_projection_extends_the_least_squares_line() -> None:
    assert trend_projection([(0.0, 1.0), (10.0, 2.0), (20.0, 3.0)], 140.0) == pytest.approx(15.0)
    assert trend_projection([(5.0, 4.0)], 125.0) == 4.0


def test_aibrix_sizes_for_the_projected_concurrency_when_it_exceeds_the_reactive_one() -> None:
    policy = AIBrixKPA(CONFIG, target_per_replica=10.0)  # 7 per pod at 70%
    decision = None
    for t in range(0, 62, 2):
        decision = policy.decide(observe(float(t), 2, running=float(t)))  # concurrency rising 1 per second
    assert decision is not None
    projected = decision.values["projected_concurrency"]
    assert projected == pytest.approx(60.0 + 120.0, rel=0.01)
    assert decision.replicas == math.ceil(projected / 7.0) and decision.rule == "Projected"


@settings(max_examples=60, deadline=None)
@given(
    desired=st.integers(1, 40),
    waiting=st.floats(0, 500),
    running=st.floats(0, 500),
    ttft=st.one_of(st.none(), st.floats(0, 60)),
    tpot=st.one_of(st.none(), st.floats(0, 2)),
)
def test_every_peer_law_stays_within_bounds(
    desired: int, waiting: float, running: float, ttft: float | None, tpot: float | None
) -> None:
    policies = [
        LlmdSLO(CONFIG, 2.0),
        LlmdQueue(CONFIG),
        DynamoPlanner(CONFIG, 1.0, 2.0),
        AIBrixKPA(CONFIG, target_per_replica=8.0),
    ]
    for policy in policies:
        for t in (0.0, 15.0, 200.0):
            signals = observe(
                t, desired, waiting=waiting, running=running, ttft_p90_seconds=ttft, tpot_p90_seconds=tpot
            )
            decision = policy.decide(signals)
            assert CONFIG.min_replicas <= decision.replicas <= CONFIG.max_replicas
