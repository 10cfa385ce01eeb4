"""The simulator hands prefix-aware routing a ``FleetIndex`` only from ``INDEXED_FROM`` routable replicas on, and
tells it of a view's changes at the next decision, not at each step: the plain scan over the views, the
reference, gives the same run to the last bit whatever the threshold."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.autoscale import AutoscalingConfig, ShoalPolicy
from shoal.gateway.routing import PrefixAware
from shoal.simulate import simulator
from shoal.simulate.presets import generate
from shoal.simulate.profile import EngineProfile
from shoal.simulate.simulator import SimConfig, SimRun, simulate


def _run(profile: EngineProfile, indexed_from: int, monkeypatch: pytest.MonkeyPatch) -> SimRun:
    monkeypatch.setattr(simulator, "INDEXED_FROM", indexed_from)
    trace = generate("bursty", profile, seed=5).head(3000)
    policy = ShoalPolicy(AutoscalingConfig(min_replicas=1, max_replicas=8, ttft_p95_seconds=1.0))
    return simulate(trace, profile, policy, PrefixAware(), SimConfig(seed=5, initial_replicas=2))


def test_the_index_and_the_plain_scan_give_the_same_run(
    profile: EngineProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = _run(profile, 10**9, monkeypatch)
    replicas = {d.replicas for d in plain.decisions}
    assert len(replicas) > 2  # the rotation changed: the index was reset and refilled along the way
    assert plain.route_reasons["prefix_hit"] and plain.route_reasons["miss"]
    for indexed_from in (1, 3):
        run = _run(profile, indexed_from, monkeypatch)
        np.testing.assert_array_equal(run.first_token, plain.first_token)
        np.testing.assert_array_equal(run.finish, plain.finish)
        assert run.route_reasons == plain.route_reasons
        assert run.per_replica_requests == plain.per_replica_requests
        assert [(d.time, d.replicas) for d in run.decisions] == [(d.time, d.replicas) for d in plain.decisions]
        np.testing.assert_array_equal(run.timeline, plain.timeline)
