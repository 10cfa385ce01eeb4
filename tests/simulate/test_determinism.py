"""One seed, one result: the same trace, profile, policy and seed give identical figures; another seed differs."""

from __future__ import annotations

import numpy as np

from shoal.simulate.compare import compare
from shoal.simulate.presets import generate
from shoal.simulate.profile import EngineProfile


def test_the_same_seed_gives_the_same_run(profile: EngineProfile) -> None:
    trace = generate("bursty", profile, seed=3).head(1500)
    first = compare(trace, profile, ["shoal", "hpa"], slo_ttft_p95_s=1.0, seed=3)
    second = compare(
        generate("bursty", profile, seed=3).head(1500), profile, ["shoal", "hpa"], slo_ttft_p95_s=1.0, seed=3
    )
    assert first.results == second.results
    for name in ("shoal", "hpa"):
        np.testing.assert_array_equal(first.runs[name].first_token, second.runs[name].first_token)
        assert [d.replicas for d in first.runs[name].decisions] == [d.replicas for d in second.runs[name].decisions]


def test_another_seed_gives_another_trace_and_start_up_times(profile: EngineProfile) -> None:
    a, b = generate("bursty", profile, seed=1), generate("bursty", profile, seed=2)
    assert len(a) != len(b) or not np.array_equal(a.arrival, b.arrival)
