"""The pure parts of the load generator: arrival process, datasets, percentiles."""

from __future__ import annotations

import math
from statistics import mean, pvariance, quantiles

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.loadgen.arrivals import arrival_gaps
from shoal.loadgen.client import RequestResult
from shoal.loadgen.datasets import random_dataset, shared_prefix_dataset
from shoal.loadgen.report import meets_slos, percentile


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_gaps_have_the_asked_rate_and_burstiness(burstiness: float) -> None:
    gaps = arrival_gaps(20_000, rate=10.0, burstiness=burstiness, seed=1)
    assert mean(gaps) == pytest.approx(0.1, rel=0.05)
    # gamma with shape k: squared coefficient of variation is 1 / k
    assert pvariance(gaps) / mean(gaps) ** 2 == pytest.approx(1 / burstiness, rel=0.1)


def test_infinite_rate_sends_everything_at_once() -> None:
    assert arrival_gaps(5, math.inf) == [0.0] * 5


@given(st.lists(st.floats(0, 1e3), min_size=2, max_size=50), st.integers(1, 99))
def test_percentile_interpolates_between_closest_ranks(values: list[float], q: int) -> None:
    """The reference: ``statistics.quantiles``' inclusive method, the same definition written independently."""
    expected = quantiles(values, n=100, method="inclusive")[q - 1]
    assert percentile(values, q) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_percentile_ends_and_empty_input() -> None:
    assert [percentile([4.0, 1.0, 3.0, 2.0], q) for q in (0, 25, 50, 99.9, 100)] == pytest.approx(
        [1.0, 1.75, 2.5, 3.997, 4.0]
    )
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) == 0.0


def test_shared_prefix_groups_repeat_their_prefix_verbatim() -> None:
    requests = shared_prefix_dataset(9, num_groups=3, prefix_len=50, suffix_len=5, output_len=7, seed=3)
    prefixes = {r.group: r.prompt.split("\n")[0] for r in requests}
    assert len(set(prefixes.values())) == 3
    assert all(r.prompt.startswith(prefixes[r.group] + "\n") for r in requests)
    assert len({r.prompt for r in requests}) == 9 and {r.max_tokens for r in requests} == {7}


def test_random_dataset_is_seeded_and_within_range() -> None:
    a = random_dataset(20, input_len=40, output_len=10, range_ratio=0.5, seed=9)
    assert a == random_dataset(20, input_len=40, output_len=10, range_ratio=0.5, seed=9)
    assert all(20 <= len(r.prompt.split()) <= 60 and 5 <= r.max_tokens <= 15 for r in a)


def test_slos_need_every_bound_met() -> None:
    r = RequestResult(success=True, ttft=0.1, e2e=1.0, output_tokens=10)
    assert meets_slos(r, {"ttft": 200, "tpot": 200})
    assert not meets_slos(r, {"ttft": 50})
    assert not meets_slos(RequestResult(success=False), {})


def test_load_generator_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, shoal.loadgen, shoal.loadgen.cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_shared_prefix_groups_are_interleaved_not_cycled() -> None:
    """Cycling groups in turn would hand round-robin perfect affinity whenever replicas divide groups."""
    requests = shared_prefix_dataset(64, num_groups=4, prefix_len=5, suffix_len=2, output_len=1, seed=1)
    order = [r.group for r in requests]
    assert sorted(order) == sorted(i % 4 for i in range(64))
    assert order != [i % 4 for i in range(64)]
    assert order == [r.group for r in shared_prefix_dataset(64, 4, 5, 2, 1, seed=1)]
