"""``--burst-memory-seconds`` (``autoscaling.burstMemorySeconds``) reaches the policy the simulator runs; what the
policy does with it is ``tests/autoscale/test_policy_rules.py``'s (a burst shed once its load is gone)."""

from __future__ import annotations

from sim_fixtures import poisson_trace, small_profile

from shoal.autoscale import AutoscalingConfig
from shoal.simulate.compare import compare


def test_the_simulator_runs_shoal_with_the_burst_memory_asked_for() -> None:
    trace = poisson_trace(4.0, 400)
    default = compare(trace, small_profile(), ["shoal"])
    off = compare(trace, small_profile(), ["shoal"], burst_memory_seconds=0)
    assert default.config.burst_memory_seconds == AutoscalingConfig.burst_memory_seconds == 1800.0
    assert off.config.burst_memory_seconds == 0.0
    assert off.results["shoal"]["requests"]["served"] == len(trace)
