"""A scale-down in the simulator loses no request, as on the real fleet: the draining replica's requests with no
token out are retried on another replica (or held while none is ready), the streaming ones finish within the
grace, and only what still runs at the drain deadline is dropped."""

from __future__ import annotations

import numpy as np
import pytest
from sim_fixtures import small_profile

from shoal.autoscale import FleetSignals, ScalingDecision
from shoal.gateway.routing import RoundRobin
from shoal.operator.termination import PRESTOP_SLEEP_SECONDS, termination
from shoal.simulate.simulator import SimConfig, drain_deadline_s, simulate
from shoal.simulate.trace import make_trace


class Schedule:
    """A replica count per time: ``[(from_time, count), ...]``, decided every second."""

    name = "schedule"
    period_seconds = 1.0

    def __init__(self, steps: list[tuple[float, int]]) -> None:
        self.steps = steps

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        wanted = [count for start, count in self.steps if signals.time >= start][-1]
        return ScalingDecision(signals.time, wanted, "Test", f"{wanted} replicas")


def _queued_burst(n: int = 60) -> tuple[list[float], list[int], list[int]]:
    """``n`` requests in the first half second, far more than three two-sequence replicas run at once."""
    return [0.5 * i / n for i in range(n)], [200] * n, [40] * n


def test_a_scale_down_with_queued_work_drops_nothing() -> None:
    arrival, prompt, output = _queued_burst()
    trace = make_trace("queued", arrival, prompt, output)
    profile = small_profile(max_num_seqs=2, covered_decode_seqs=16)
    run = simulate(trace, profile, Schedule([(0.0, 3), (1.0, 1)]), RoundRobin(), SimConfig(initial_replicas=3))
    assert run.dropped == {} and run.in_flight == 0
    assert np.isfinite(run.finish).all()
    # the two removed replicas left within seconds (what they streamed at 1 s finished); the survivor served the rest
    spans = sorted(run.replica_spans, key=lambda span: span[1])
    assert all(end < 5.0 for _, end in spans[:2]) and spans[2][1] > 5.0
    assert sum(run.per_replica_requests) >= len(trace)  # retried requests were placed twice


def test_a_scale_to_zero_with_queued_work_holds_it_until_a_replica_is_back() -> None:
    arrival, prompt, output = _queued_burst(30)
    trace = make_trace("queued", arrival, prompt, output)
    profile = small_profile(max_num_seqs=2, covered_decode_seqs=16, startup_s=(5.0, 5.0))
    policy = Schedule([(0.0, 2), (1.0, 0), (3.0, 1)])
    run = simulate(trace, profile, policy, RoundRobin(), SimConfig(initial_replicas=2))
    assert run.dropped == {} and np.isfinite(run.finish).all()
    late = run.first_token[run.first_token > 3.0]
    assert len(late) and late.min() >= 8.0  # the refused ones waited for the new replica (ready 5 s after 3 s)


def test_only_what_still_streams_at_the_drain_deadline_is_dropped() -> None:
    trace = make_trace("long", [0.0, 0.0, 0.1], [100, 100, 100], [2_000_000, 20, 20])
    profile = small_profile(kv_capacity_tokens=4_000_000, max_num_seqs=1, covered_decode_seqs=16)
    deadline = drain_deadline_s(profile, trace)
    run = simulate(trace, profile, Schedule([(0.0, 2), (1.0, 1)]), RoundRobin(), SimConfig(initial_replicas=2))
    # the removed replica streams request 0 with request 2 queued behind it: 2 is served by the survivor, 0 is
    # cut at the drain deadline, when the replica ends
    assert run.dropped == {0: "drain_timeout"}
    assert np.isfinite(run.finish[[1, 2]]).all()
    assert any(end == pytest.approx(1.0 + deadline) for _, end in run.replica_spans)


def test_the_drain_deadline_is_the_operators_termination_law() -> None:
    trace = make_trace("two", [0.0, 1.0], [3000, 100], [1000, 10])
    profile = small_profile()
    tpot = profile.step.seconds(0, profile.max_num_seqs, profile.kv_capacity_tokens)
    expected = termination(4000, tpot, gpus=0, explicit_grace_s=None)
    assert drain_deadline_s(profile, trace) == PRESTOP_SLEEP_SECONDS + expected.drain_s
    assert expected.grace_s == pytest.approx(PRESTOP_SLEEP_SECONDS + expected.drain_s + 10)
