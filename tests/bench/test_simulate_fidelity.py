"""The pieces of ``bench/simulate_fidelity.py`` that need no engine: the burst trace and its file, reading the
fleet from the dashboard file ``shoal up`` writes, the measured run in the simulator's shape, the simulated local
fleet, and the side-by-side report. The run itself (real engines, minutes) is a benchmark."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from shoal.loadgen.client import RequestResult
from shoal.loadgen.datasets import random_dataset
from shoal.local.manifest import load_manifest
from shoal.local.snapshot import DecisionRow, FleetSnapshot, ReplicaRow, Timeline
from shoal.simulate.profile import load_profile
from shoal.simulate.results import summarize_run
from shoal.simulate.trace import load_trace, make_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import simulate_fidelity as fidelity


def words(text: str) -> int:
    return len(text.split()) + 1


def test_burst_trace_steps_its_rate_and_counts_tokens_with_the_given_tokenizer() -> None:
    phases = fidelity.burst_phases(4.0, 3.0, base_s=100, step_s=100, after_s=100)
    pool = random_dataset(3000, 40, 16, 0.5, seed=1)
    trace, sent = fidelity.burst_trace(phases, pool, words, seed=7)
    counts = np.bincount((trace.arrival // 100).astype(int), minlength=3)
    assert counts[1] / counts[0] == pytest.approx(3.0, rel=0.2)
    assert counts[2] / counts[0] == pytest.approx(1.0, rel=0.2)
    assert trace.bursts == (100.0,)
    assert list(trace.prompt_tokens) == [words(r.prompt) for r in sent]
    assert list(trace.output_tokens) == [r.max_tokens for r in sent]
    again, _ = fidelity.burst_trace(phases, pool, words, seed=7)
    assert np.array_equal(again.arrival, trace.arrival)


def test_burst_trace_refuses_more_arrivals_than_requests() -> None:
    with pytest.raises(ValueError, match="arrivals but only 3 requests"):
        fidelity.burst_trace(fidelity.burst_phases(10.0, 3.0, 10, 10, 10), random_dataset(3, 8, 4), words, seed=0)


def test_the_written_trace_is_what_the_simulator_reads(tmp_path: Path) -> None:
    trace = make_trace("t", [0.0, 0.25, 1.5], [12, 40, 7], [3, 9, 1])
    fidelity.write_trace(trace, tmp_path / "trace.csv")
    back = load_trace(tmp_path / "trace.csv")
    assert np.allclose(back.arrival, trace.arrival)
    assert list(back.prompt_tokens) == [12, 40, 7]
    assert list(back.output_tokens) == [3, 9, 1]


def _snapshot(
    now: float, desired: int, rows: list[ReplicaRow], decisions: list[DecisionRow], ttft: float | None = None
) -> FleetSnapshot:
    return FleetSnapshot(
        time=now,
        name="f",
        model="m",
        url="http://x",
        desired=desired,
        autoscaling=True,
        replicas=tuple(rows),
        ttft_p95_seconds=ttft,
        output_tokens_per_second=None,
        arrival_rate=None,
        prefix_hit_rate=None,
        routing={},
        decisions=tuple(decisions),
        events=(),
        metrics_missing=None,
    )


def _row(name: str, phase: str, since: float, running: float | None = None) -> ReplicaRow:
    return ReplicaRow(name, phase, since, None, None, 0.0 if running is not None else None, running, None, 0, None)


def test_the_watch_reads_counts_start_ups_and_decisions_from_the_dashboard_file(tmp_path: Path) -> None:
    """Written by shoal up's own Timeline, so a change of that file's shape breaks this test, not a run."""
    timeline = Timeline(tmp_path / "dashboard.json")
    watch = fidelity.FleetWatch(tmp_path / "dashboard.json")
    watch.sample(99.0)  # no file yet: nothing recorded
    up = DecisionRow(104.0, 1, 2, "ScaleUpQueue", "queue 9 > 4 per ready")
    for now, desired, rows, decisions, ttft in [
        (100.0, 1, [_row("engine-0", "starting", 100.0)], [], None),
        (101.0, 1, [_row("engine-0", "ready", 101.0)], [], None),
        (105.0, 2, [_row("engine-0", "ready", 101.0, running=3), _row("engine-1", "starting", 104.5)], [up], 3.0),
        (
            112.0,
            2,
            [_row("engine-0", "ready", 101.0, running=2), _row("engine-1", "ready", 111.0, running=1)],
            [up],
            2.0,
        ),
        (130.0, 1, [_row("engine-0", "draining", 129.0), _row("engine-1", "ready", 111.0)], [up], None),
        (140.0, 1, [_row("engine-1", "ready", 111.0)], [up], None),
    ]:
        timeline.write(_snapshot(now, desired, rows, decisions, ttft))
        watch.sample(now)
    assert [r[1:] for r in watch.rows] == [
        (1, 0, 1, 0),
        (1, 1, 0, 0),
        (2, 1, 1, 0),
        (2, 2, 0, 0),
        (1, 1, 0, 1),
        (1, 1, 0, 0),
    ]
    assert watch.startups() == {"engine-0": 1.0, "engine-1": 6.5}
    assert watch.startups(after=102.0) == {"engine-1": 6.5}
    assert watch.gone == {"engine-0": 140.0}
    assert list(watch.decisions) == [(104.0, 2)]
    assert [busy for _, _, busy in watch.usage] == [0, 0, 1, 2, 0, 0]
    assert watch.engine_ttft_per_window(100.0, window_s=10.0) == [3.0, 2.0, None, None, None]


def test_busy_core_share_and_cores_per_minute_come_from_serving_cpu_time() -> None:
    watch = fidelity.FleetWatch(Path("/nonexistent"))
    # 0-60 s: one busy engine using half a core; 60-120 s: two busy engines using 0.8 cores between them
    watch.usage = [(t, 0.5 * t, 1) for t in range(60)] + [(60 + t, 30 + 0.8 * t, 2) for t in range(61)]
    assert watch.cores_per_window(0.0) == pytest.approx([0.5, 0.8])
    assert watch.busy_core_share(0.0) == pytest.approx((30 + 48) / (60 + 120))
    assert watch.busy_core_share(60.0) == pytest.approx(0.4)
    assert watch.busy_core_share(200.0) is None


def test_the_measured_run_reads_as_a_simulated_one() -> None:
    trace = make_trace("t", [0.0, 1.0, 2.0, 3.0], [10, 10, 10, 10], [4, 4, 4, 4], bursts=(1.0,))
    watch = fidelity.FleetWatch(Path("/nonexistent"))
    watch.rows = [(999.0, 1, 1, 0, 0), (1000.0, 1, 1, 0, 0), (1002.0, 2, 1, 1, 0), (1009.0, 2, 2, 0, 0)]
    watch.started = {"engine-0": 990.0, "engine-1": 1001.5}
    watch.ready = {"engine-0": 991.0, "engine-1": 1008.0}
    watch.decisions = {(1001.5, 2): {"rule": "ScaleUpQueue", "message": "queue"}}
    results = [
        RequestResult(True, ttft=0.5, e2e=1.0),
        RequestResult(True, ttft=1.5, e2e=2.0),
        RequestResult(False, error="HTTP 504: first token"),
        RequestResult(True, ttft=0.25, e2e=0.75),
    ]
    replay = fidelity.Replay(t0=1000.0, sent=[0.0, 1.0, 2.0, 3.0], results=results, watch=watch)
    run = fidelity.measured_run(trace, replay, "prefix-aware")
    summary = summarize_run(run, 2.0, trace.bursts)
    assert summary["ttft_p50_s"] == pytest.approx(0.5)
    assert summary["requests"] == {
        "arrived": 4,
        "served": 3,
        "dropped": {"failed: HTTP 504: first token": 1},
        "in_flight": 0,
    }
    assert fidelity.scale_events(run) == [(1.5, 1, 2, "ScaleUpQueue")]
    assert run.timeline[:, 0].tolist() == [0.0, 2.0, 9.0]
    assert sorted(run.replica_spans) == [(0.0, 9.0), (1.5, 9.0)]
    minutes = fidelity.per_minute(run)
    assert minutes[0]["requests"] == 4 and minutes[0]["ttft_p95_s"] == math.inf


def test_the_simulated_local_fleet_runs_shoal_up_policy_interval_and_scales_on_a_step(tmp_path: Path) -> None:
    manifest_path = tmp_path / "fleet.yaml"
    manifest_path.write_text(fidelity.manifest_text("f", "smollm2-135m", 8, 3, 2.0, 4, 60, 600))
    manifest = load_manifest(manifest_path)
    assert manifest.spec.gateway.timeouts.first_token_seconds == 600
    profile = load_profile("smollm2-135m-cpu")
    capacity = profile.with_engine(max_num_seqs=8).capacity_rps(96, 32)
    phases = fidelity.burst_phases(0.5 * capacity, 3.0, 30, 60, 30)
    trace, _ = fidelity.burst_trace(phases, random_dataset(1000, 96, 32, 0.5, seed=2), words, seed=3)
    run = fidelity.simulate_fleet(trace, profile, manifest, (8.0, 12.0), seed=0)
    times = [d.time for d in run.decisions]
    assert np.allclose(np.diff(times), 2.0)  # shoal up asks the policy every 2 s, not the operator's 10 s
    assert run.timeline[0, 2] == 1 and run.timeline[:, 1].max() > 1  # one replica at first, then a scale-up
    assert not run.dropped and run.in_flight == 0
    report = fidelity.side_by_side({"measured": run, "sim": run}, trace, 2.0)
    text = fidelity.format_side_by_side(report)
    assert text.splitlines()[1].split()[:2] == ["0", str(report["sim"]["per_minute"][0]["requests"])]
    assert f"scale events sim: {fidelity.scale_events(run)[0][0]:.0f}s 1->" in text


def test_slowed_profile_scales_every_step_and_keeps_the_engine() -> None:
    profile = load_profile("smollm2-135m-cpu")
    slow = fidelity.slowed(profile, 2.5)
    assert slow.step.seconds(100, 4, 500, 1000) == pytest.approx(2.5 * profile.step.seconds(100, 4, 500, 1000))
    assert (slow.max_num_seqs, slow.kv_capacity_tokens) == (profile.max_num_seqs, profile.kv_capacity_tokens)
