"""The peers' policies as the simulator runs them: their documented rules, and properties over any load.

Each rule is checked against the number its project documents (HPA: tolerance 0.1, up by max(4 pods, 100%),
300 s down-stabilization, pods without metrics as 0 on scale-up; KEDA: waiting requests over 5; KPA: 2x panic,
no scale-down in panic, down by at most half).
"""

from __future__ import annotations

import math

from fleets import observe
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.autoscale import AutoscalingConfig, ScalingPolicy
from shoal.autoscale.baselines import FixedForPeak, HPAStyle, KEDAStyle, KPAStyle

CONFIG = AutoscalingConfig(min_replicas=1, max_replicas=40)


def test_hpa_holds_within_tolerance_and_scales_in_proportion_outside_it() -> None:
    hpa = HPAStyle(CONFIG, target_per_replica=10.0)
    assert hpa.decide(observe(0.0, 4, running=43.0)).replicas == 4  # ratio 1.075: within 0.1
    assert hpa.decide(observe(15.0, 4, running=60.0)).replicas == 6  # ceil(60 / 10)


def test_hpa_scales_up_at_most_max_of_4_pods_and_100_percent() -> None:
    assert HPAStyle(CONFIG, 1.0).decide(observe(0.0, 2, running=100.0)).replicas == 6  # +4 beats x2
    assert HPAStyle(CONFIG, 1.0).decide(observe(0.0, 10, running=100.0)).replicas == 20  # x2 beats +4


def test_hpa_counts_loading_pods_as_zero_on_scale_up() -> None:
    # 2 ready pods at 10 each over a target of 5, 2 pods still loading: (20 + 0 + 0) / (4 * 5) = 1.0, hold.
    assert HPAStyle(CONFIG, 5.0).decide(observe(0.0, 4, starting=2, running=20.0)).replicas == 4
    assert HPAStyle(CONFIG, 5.0).decide(observe(0.0, 2, running=20.0)).replicas == 4


def test_hpa_scales_down_only_after_300_seconds_of_lower_recommendations() -> None:
    hpa = HPAStyle(CONFIG, 10.0)
    assert hpa.decide(observe(0.0, 8, running=80.0)).replicas == 8
    assert hpa.decide(observe(15.0, 8, running=20.0)).replicas == 8
    assert hpa.decide(observe(299.0, 8, running=20.0)).replicas == 8
    assert hpa.decide(observe(301.0, 8, running=20.0)).replicas == 2


def test_keda_scales_on_waiting_requests_over_5_per_pod() -> None:
    keda = KEDAStyle(CONFIG)
    assert keda.decide(observe(0.0, 2, running=200.0, waiting=0.0)).replicas == 2  # busy but nothing waits: hold
    assert keda.decide(observe(15.0, 2, waiting=30.0)).replicas == 6  # ceil(30 / 5)


def test_kpa_panics_at_twice_the_ready_pods_and_never_scales_down_while_panicking() -> None:
    kpa = KPAStyle(CONFIG, target_per_replica=10.0)  # 7 per pod at 70% utilization
    assert kpa.decide(observe(0.0, 2, running=14.0)).replicas == 2
    panic = kpa.decide(observe(2.0, 2, running=60.0))  # panic window wants ceil(37 / 7) = 6 >= 2 x 2
    assert panic.rule == "Panic" and panic.replicas >= 4
    calm = [kpa.decide(observe(t, panic.replicas, running=1.0)) for t in range(4, 60, 2)]
    assert all(d.rule == "Panic" and d.replicas >= panic.replicas for d in calm)
    after = kpa.decide(observe(2.0 + 61.0 + 60.0, panic.replicas, running=1.0))
    assert after.rule == "Stable" and after.replicas < panic.replicas


def test_kpa_scales_down_by_at_most_half_the_ready_pods_per_tick() -> None:
    kpa = KPAStyle(CONFIG, 10.0)
    assert kpa.decide(observe(0.0, 20, running=0.0)).replicas == 10


loads = st.lists(
    st.tuples(
        st.floats(0.5, 30.0), st.integers(0, 30), st.integers(0, 5), st.floats(0.0, 500.0), st.floats(0.0, 500.0)
    ),
    min_size=1,
    max_size=40,
)


def _policies(config: AutoscalingConfig) -> list[ScalingPolicy]:
    return [HPAStyle(config, 8.0), KEDAStyle(config), KPAStyle(config, 8.0), FixedForPeak(config.max_replicas)]


@settings(max_examples=60, deadline=None)
@given(min_replicas=st.integers(0, 3), extra=st.integers(0, 20), steps=loads)
def test_every_baseline_stays_within_bounds_and_its_rate_limits(
    min_replicas: int, extra: int, steps: list[tuple[float, int, int, float, float]]
) -> None:
    config = AutoscalingConfig(min_replicas=min_replicas, max_replicas=min_replicas + extra + 1)
    for policy in _policies(config):
        now, desired = 0.0, max(min_replicas, 1)
        for gap, ready, starting, running, waiting in steps:
            now += gap
            ready = min(ready, desired)
            decision = policy.decide(
                observe(
                    now, desired, ready=ready, starting=min(starting, desired - ready), running=running, waiting=waiting
                )
            )
            assert config.min_replicas <= decision.replicas <= config.max_replicas, (policy.name, decision)
            if isinstance(policy, HPAStyle) and decision.replicas > desired:
                assert decision.replicas <= max(desired + 4, 2 * desired)
            if isinstance(policy, KPAStyle) and decision.replicas < desired:
                assert decision.replicas >= max(config.min_replicas, math.floor(max(1, ready) / 2))
            desired = decision.replicas
