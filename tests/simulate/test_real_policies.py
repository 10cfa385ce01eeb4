"""The simulator runs the policy objects it is given (Shoal's own class, the gateway's routing), not copies."""

from __future__ import annotations

from collections.abc import Sequence

from sim_fixtures import poisson_trace

import shoal.autoscale
import shoal.gateway.routing
from shoal.autoscale import AutoscalingConfig, FleetSignals, ScalingDecision
from shoal.gateway.routing import Decision, IdOrdered, ReplicaView, RouteRequest
from shoal.simulate.policies import POLICY_NAMES, Sizing, make_scaling_policy
from shoal.simulate.profile import EngineProfile
from shoal.simulate.replica import SimReplica
from shoal.simulate.simulator import FleetSimulator, SimConfig, simulate


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
    assert type(make_scaling_policy("shoal", config, Sizing(8.0, 2, 1.0))) is shoal.autoscale.ShoalPolicy
    assert {make_scaling_policy(n, config, Sizing(8.0, 2, 1.0)).name for n in POLICY_NAMES} == set(POLICY_NAMES)


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


class CheckingRouting:
    """Prefix-aware routing, unchanged, checking each snapshot against the simulated replicas as it goes."""

    name = "prefix-aware"

    def __init__(self) -> None:
        self.inner = shoal.gateway.routing.PrefixAware()
        self.by_name: dict[str, SimReplica] = {}
        self.calls = 0
        self.sizes: set[int] = set()

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        ids = [view.replica_id for view in replicas]
        assert isinstance(replicas, IdOrdered) and ids == sorted(ids)
        for view in replicas:
            replica = self.by_name[view.replica_id]
            assert replica.phase == "ready"
            assert (view.load_tokens, view.sequences, view.cached, view.homes) == (
                replica.load_tokens,
                replica.in_flight,
                replica.cache.blocks,
                replica.cache.homes,
            )
        self.calls += 1
        self.sizes.add(len(replicas))
        return self.inner.decide(replicas, request)


def test_views_updated_in_place_are_what_the_gateway_would_build(profile: EngineProfile) -> None:
    """The simulator keeps one view per replica and changes it as leases would; the policy must see the same
    snapshot a fresh build gives, in replica-id order, only ready replicas, through scale-ups and downs."""
    routing = CheckingRouting()
    policy = shoal.autoscale.ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=6))
    simulator = FleetSimulator(
        poisson_trace(30.0, 3000, groups=4), profile, policy, routing, SimConfig(initial_replicas=1, tail_s=60.0)
    )
    routing.by_name = simulator.by_name
    simulator.run()
    assert routing.calls == sum(r is not None for r in simulator.routed_to) > 0  # the checks ran on every decision
    assert len(routing.sizes) > 1  # the rotation changed while requests were routed


def test_one_off_prompts_count_as_homes_while_they_run(profile: EngineProfile) -> None:
    """The gateway counts a one-off prompt it sent as a home; the simulator counts one while it runs, so a replica
    that holds no prefix group still shows the misses it is serving (else it would take every miss up to its
    bound), and none is left once every request has finished."""
    routing = CheckingRouting()
    policy = shoal.autoscale.ShoalPolicy(AutoscalingConfig(min_replicas=2, max_replicas=2))
    simulator = FleetSimulator(
        poisson_trace(20.0, 1000, groups=2), profile, policy, routing, SimConfig(initial_replicas=2, tail_s=120.0)
    )
    routing.by_name = simulator.by_name
    one_off_seen: list[int] = []
    inner = routing.inner.decide

    def decide(replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        one_off_seen.extend(simulator.by_name[v.replica_id].cache.one_off for v in replicas)
        return inner(replicas, request)

    routing.inner.decide = decide  # type: ignore[method-assign]
    simulator.run()
    assert max(one_off_seen) > 0  # misses were in flight when later requests were routed, and counted
    assert all(r.cache.one_off == 0 for r in simulator.by_name.values())
    assert all(r.cache.homes <= 2 for r in simulator.by_name.values())  # only the two groups can stay homes
