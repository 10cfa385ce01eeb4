"""The same policy over another engine kind's signals: what a kind exports no series for reaches the policy as
missing (None), as its scrape would, and the fleet still scales on what is there."""

from __future__ import annotations

import pytest
from sim_fixtures import poisson_trace
from test_real_policies import RecordingShoalPolicy

import shoal.gateway.routing
from shoal.autoscale import AutoscalingConfig
from shoal.engine_kinds import adapter
from shoal.simulate.profile import EngineProfile
from shoal.simulate.simulator import SimConfig, simulate


def _run(profile: EngineProfile, kind: str) -> RecordingShoalPolicy:
    policy = RecordingShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=6))
    run = simulate(
        poisson_trace(30.0, 3000), profile, policy, shoal.gateway.routing.RoundRobin(), SimConfig(engine_kind=kind)
    )
    assert not run.dropped, "every request is served whatever the autoscaler can see"
    return policy


@pytest.mark.parametrize("kind", ["shoal", "vllm", "sglang", "llamacpp"])
def test_each_kind_reaches_the_policy_with_only_the_signals_it_exports(profile: EngineProfile, kind: str) -> None:
    metrics = adapter(kind).metrics
    seen = _run(profile, kind).seen
    ready = [r for s in seen for r in s.ready]
    assert ready and all(r.waiting is not None and r.running is not None for r in ready)
    assert all((r.kv_usage is not None) == bool(metrics.kv_usage) for r in ready)
    assert all((r.max_num_seqs is not None) == bool(metrics.max_num_seqs) for r in ready)
    assert all(s.arrival_rate is None for s in seen) == (metrics.finished is None)
    assert all(s.ttft_p95_seconds is None for s in seen) == (metrics.ttft is None)


def test_a_llama_fleet_scales_up_on_its_queue_alone(profile: EngineProfile) -> None:
    """llama.cpp exports no TTFT and no finished-request counter: no rule that needs them can fire, and the queue
    still grows the fleet past one replica (30 req/s is more than one small replica serves)."""
    answers = _run(profile, "llamacpp").answers
    assert any(a.replicas > 1 for a in answers)
    assert {a.rule for a in answers if a.rule.startswith("ScaleUp")} == {"ScaleUpQueue"}
