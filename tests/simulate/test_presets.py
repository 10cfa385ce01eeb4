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
