"""The simulator runs the policy objects it is given (Shoal's own class, the gateway's routing), not copies."""

from __future__ import annotations

from sim_fixtures import poisson_trace

import shoal.autoscale
import shoal.gateway.routing
from shoal.autoscale import AutoscalingConfig, FleetSignals, ScalingDecision
from shoal.simulate.policies import POLICY_NAMES, Sizing, make_scaling_policy
from shoal.simulate.profile import EngineProfile
from shoal.simulate.simulator import SimConfig, simulate


class RecordingShoalPolicy(shoal.autoscale.ShoalPolicy):
    """Shoal's policy, unchanged, remembering what it was asked and what it answered."""

    def __init__(self, config: AutoscalingConfig) -> None:
        super().__init__(config)
        self.seen: list[FleetSignals] = []
        self.answers: list[ScalingDecision] = []

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        self.seen.append(signals)
        self.answers.append(super().decide(signals))
        return self.answers[-1]


def test_the_shoal_policy_is_the_class_production_runs() -> None:
    config = AutoscalingConfig(min_replicas=1, max_replicas=4)
    assert type(make_scaling_policy("shoal", config, Sizing(8.0, 2))) is shoal.autoscale.ShoalPolicy
    assert {make_scaling_policy(n, config, Sizing(8.0, 2)).name for n in POLICY_NAMES} == set(POLICY_NAMES)


def test_every_decision_applied_is_the_policy_objects_own(profile: EngineProfile) -> None:
    policy = RecordingShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=6))
    routing = shoal.gateway.routing.RoundRobin()
    trace = poisson_trace(30.0, 3000)
    run = simulate(trace, profile, policy, routing, SimConfig(initial_replicas=1))
    assert run.decisions and all(a is b for a, b in zip(run.decisions, policy.answers, strict=True))
    assert any(d.replicas > 1 for d in run.decisions)  # 30 req/s is more than one small replica serves
    assert [s.time for s in policy.seen] == sorted(s.time for s in policy.seen)
    assert all(s.desired >= 1 for s in policy.seen)
    ready = [s for s in policy.seen if s.ready]
    assert all(r.waiting is not None and r.running is not None for s in ready for r in s.ready)
    assert any(s.ttft_p95_seconds is not None and s.arrival_rate for s in policy.seen)
    assert routing._counter == len(trace)  # the routing object itself placed every request
