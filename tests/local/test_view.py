"""The terminal view and the ``--no-tui`` lines show every figure of a snapshot, and say "-" for what is unknown;
the snapshot turns figures that are not numbers into unknown ones."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.console import Console

from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.signals import FleetSignals
from shoal.local.figures import Extras
from shoal.local.fleet import EngineFleet, EngineLaunch, Event
from shoal.local.snapshot import DecisionRow, FleetSnapshot, ReplicaRow, Timeline, decision_row, take
from shoal.local.view import event_line, render, summary_line

NOW = 1_800_000_000.0


def _snapshot(**changes: object) -> FleetSnapshot:
    fields: dict[str, object] = dict(
        time=NOW,
        name="demo",
        model="smollm2-135m",
        url="http://127.0.0.1:8080",
        desired=3,
        autoscaling=True,
        replicas=(
            ReplicaRow("engine-0", "ready", NOW - 60, "http://127.0.0.1:40001", 101, 5.0, 8.0, 0.25, 0, None),
            ReplicaRow("engine-1", "starting", NOW - 4, "http://127.0.0.1:40002", 102, None, None, None, 0, None),
            ReplicaRow(
                "engine-2",
                "backoff",
                NOW - 1,
                None,
                None,
                None,
                None,
                None,
                2,
                "exited with 1 while loading: OSError: bad weights",
            ),
        ),
        ttft_p95_seconds=1.234,
        output_tokens_per_second=187.0,
        arrival_rate=3.5,
        prefix_hit_rate=0.82,
        routing={"prefix_hit": 40.0, "miss": 9.0},
        decisions=(DecisionRow(NOW - 5, 1, 3, "ScaleUpQueue", "queue 10 per ready replica > target 4"),),
        events=(Event(NOW - 1, "error", "engine-2 exited with 1 while loading"),),
        metrics_missing=None,
    )
    fields.update(changes)
    return FleetSnapshot(**fields)  # type: ignore[arg-type]


def _text(snapshot: FleetSnapshot) -> str:
    console = Console(width=200, record=True, force_terminal=False)
    console.print(render(snapshot))
    return console.export_text()


def test_the_view_shows_replicas_fleet_figures_routing_and_decisions() -> None:
    text = _text(_snapshot())
    for expected in (
        "http://127.0.0.1:8080/v1",
        "engine-0",
        "ready",
        "starting",
        "backoff",
        "25%",
        "OSError: bad weights",
        "TTFT p95 1.23 s",
        "187 tok/s",
        "prefix hits 82%",
        "prefix_hit 40",
        "miss 9",
        "1 -> 3",
        "ScaleUpQueue",
        "queue 10 per ready replica > target 4",
        "engine-2 exited with 1 while loading",
    ):
        assert expected in text, expected


def test_unknown_figures_are_dashes_and_missing_metrics_are_said() -> None:
    snapshot = _snapshot(
        ttft_p95_seconds=None,
        output_tokens_per_second=None,
        prefix_hit_rate=None,
        routing={},
        decisions=(),
        autoscaling=False,
        metrics_missing="no engine answered",
    )
    text = _text(snapshot)
    assert "TTFT p95 -" in text and "- tok/s" in text and "prefix hits -" in text
    assert "autoscaling off" in text and "metrics: no engine answered" in text
    line = summary_line(snapshot)
    assert "1 ready / 2 starting / 0 draining (desired 3)" in line and "routed: none yet" in line
    assert "metrics: no engine answered" in line


def test_event_lines_carry_the_level() -> None:
    assert "ERROR   engine-2 crashed" in event_line(Event(NOW, "error", "engine-2 crashed"))


def test_nan_figures_become_unknown_and_the_timeline_stays_valid_json(tmp_path: Path) -> None:
    fleet = EngineFleet(EngineLaunch([], {}, tmp_path, 60.0), tmp_path / "backends.txt")
    signals = FleetSignals(
        time=NOW, desired=1, ttft_p95_seconds=math.nan, output_tokens_per_second=math.inf, arrival_rate=2.0
    )
    hold = ScalingDecision(NOW, 1, "HoldSteady", "holding 1", {"capacity_floor": math.inf, "waiting": 0.0})
    current = decision_row(hold, 1)
    snapshot = take(NOW, "demo", "m", "http://127.0.0.1:8080", fleet, True, signals, Extras(None, {}, 0), (), current)
    assert snapshot.ttft_p95_seconds is None and snapshot.output_tokens_per_second is None
    assert snapshot.arrival_rate == 2.0
    timeline = Timeline(tmp_path / "dashboard.json")
    timeline.add(snapshot)
    timeline.write(snapshot)
    document = json.loads((tmp_path / "dashboard.json").read_text())
    assert document["samples"][0]["ttft_p95"] is None and document["snapshot"]["arrival_rate"] == 2.0
    assert document["snapshot"]["current"]["rule"] == "HoldSteady"
    assert document["snapshot"]["current"]["values"] == {"capacity_floor": None, "waiting": 0.0}


def test_the_view_and_the_lines_name_the_rule_holding_the_count_now() -> None:
    hold = DecisionRow(
        NOW - 1, 3, 3, "HoldNoQueue", "holding 3: TTFT P95 8s > target 2s, but 2 of 3 ready replicas have no request"
    )
    snapshot = _snapshot(current=hold)
    assert "autoscaler now: HoldNoQueue: holding 3: TTFT P95 8s > target 2s" in _text(snapshot)
    assert "autoscaler: HoldNoQueue" in summary_line(snapshot)
    assert "autoscaler now" not in _text(_snapshot())
