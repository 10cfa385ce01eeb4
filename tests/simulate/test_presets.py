"""The generated presets follow their rate curves, mark their bursts, and share prefixes; Azure needs its files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shoal.simulate.presets import generate, resolve_trace
from shoal.simulate.profile import EngineProfile
from shoal.simulate.trace import TraceError


def _rate(arrival: np.ndarray, start: float, end: float) -> float:
    return float(((arrival >= start) & (arrival < end)).sum()) / (end - start)


def test_bursty_steps_to_three_times_its_base_rate_at_each_marked_burst(profile: EngineProfile) -> None:
    trace = generate("bursty", profile, seed=5)
    assert trace.bursts == (900.0, 2400.0, 3900.0)
    base = _rate(trace.arrival, 0.0, 900.0)
    for burst in trace.bursts:
        assert _rate(trace.arrival, burst, burst + 300.0) / base == pytest.approx(3.0, rel=0.2)
    assert (trace.prefix_group >= 0).mean() == pytest.approx(0.7, abs=0.05)


def test_bursty_jitter_draws_its_gaps_from_the_seed_and_keeps_bursty_otherwise(profile: EngineProfile) -> None:
    gaps = set()
    for seed in range(6):
        trace = generate("bursty-jitter", profile, seed=seed)
        first, *later = trace.bursts
        assert first == 900.0 and len(later) == 2
        between = np.diff(trace.bursts)
        assert ((between >= 1200.0) & (between <= 1800.0)).all()
        gaps.add(tuple(between))
        base = _rate(trace.arrival, 0.0, 900.0)
        for burst in trace.bursts:
            assert _rate(trace.arrival, burst, burst + 300.0) / base == pytest.approx(3.0, rel=0.2)
    assert len(gaps) == 6  # each seed its own gaps
    assert generate("bursty", profile, seed=5).bursts == (900.0, 2400.0, 3900.0)  # bursty itself keeps time


def test_diurnal_rises_fourfold_to_its_peak_and_falls_back(profile: EngineProfile) -> None:
    trace = generate("diurnal", profile, seed=5)
    edge, peak = _rate(trace.arrival, 0.0, 300.0), _rate(trace.arrival, 3450.0, 3750.0)
    assert peak / edge == pytest.approx(4.0, rel=0.2)
    assert _rate(trace.arrival, 6900.0, 7200.0) / edge == pytest.approx(1.0, rel=0.2)


def test_an_azure_preset_without_its_files_says_where_to_put_them(
    profile: EngineProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOAL_AZURE_TRACE_DIR", str(tmp_path))
    with pytest.raises(TraceError, match=r"AzureLLMInferenceTrace_conv.csv is missing"):
        resolve_trace("azure-conv", profile)


def test_weekly_has_five_weekdays_that_peak_twice_as_high_as_the_weekend(profile: EngineProfile) -> None:
    trace = generate("weekly", profile, seed=2)
    weekday, weekend = _rate(trace.arrival, 1500.0, 1800.0), _rate(trace.arrival, 3300.0, 3600.0)
    assert weekday / weekend == pytest.approx(6.0 / 3.0, rel=0.2)


def test_a_flash_crowd_jumps_fourfold_at_its_marked_start_and_decays(profile: EngineProfile) -> None:
    trace = generate("flash-crowd", profile, seed=4)
    (flash,) = trace.bursts
    assert 900.0 <= flash <= 2400.0
    before, during = _rate(trace.arrival, flash - 300.0, flash), _rate(trace.arrival, flash, flash + 30.0)
    assert during / before == pytest.approx(4.0 * 0.97, rel=0.2)  # 8 units against 2, a little decayed
    decayed = _rate(trace.arrival, flash + 1080.0, flash + 1200.0)  # 3.6 time constants on: 2 + 6 e^-3.6 units
    assert decayed / before == pytest.approx(1.08, rel=0.2)


def test_a_ramp_rises_sixfold_slowly_and_holds(profile: EngineProfile) -> None:
    trace = generate("ramp", profile, seed=1)
    start, end = _rate(trace.arrival, 0.0, 300.0), _rate(trace.arrival, 3000.0, 3600.0)
    assert end / start == pytest.approx(6.0, rel=0.2)


def test_heavy_tail_prompts_have_a_long_tail(profile: EngineProfile) -> None:
    alone = generate("heavy-tail", profile, seed=1)
    usual = generate("steady", profile, seed=1)
    tail = alone.prompt_tokens[alone.prefix_group < 0]
    assert np.median(tail) < np.median(usual.prompt_tokens[usual.prefix_group < 0])
    assert np.percentile(tail, 99.5) > 20 * np.median(tail)  # a log-normal's is 8x, Pareto 1.2's ~45x
