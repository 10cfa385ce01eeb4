"""``shoal simulate`` end to end on a small trace file: the table, ``--json`` in the documented shape, the plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_fixtures import poisson_trace, small_profile

from shoal.cli import main
from shoal.simulate.policies import POLICY_NAMES


def test_simulate_writes_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = poisson_trace(6.0, 1500, groups=4)
    csv = tmp_path / "trace.csv"
    rows = zip(
        trace.arrival, trace.prompt_tokens, trace.output_tokens, trace.prefix_group, trace.prefix_tokens, strict=True
    )
    csv.write_text(
        "timestamp,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n"
        + "".join(f"{a},{p},{o},{'' if g < 0 else g},{x}\n" for a, p, o, g, x in rows)
    )
    profile = tmp_path / "profile.json"
    profile.write_text(small_profile().to_json())
    out, plots = tmp_path / "out.json", tmp_path / "plots"
    code = main(
        [
            "simulate",
            "--trace",
            str(csv),
            "--profile",
            str(profile),
            "--slo-ttft-p95",
            "1.5",
            "--replicas-max",
            "6",
            "--seed",
            "4",
            "--json",
            str(out),
            "--plots",
            str(plots),
            "--no-progress",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert all(name in table for name in POLICY_NAMES)
    results = json.loads(out.read_text())
    assert set(results) == set(POLICY_NAMES)
    for summary in results.values():
        figures = summary["seeds"]["4"]
        assert summary["mean"]["replica_hours"] == figures["replica_hours"]  # one seed: its own mean
        assert {"slo_attainment", "replica_hours", "ttft_p95_s", "scale_events"} <= set(figures)
        assert 0.0 <= figures["slo_attainment"] <= 1.0
        assert figures["requests"]["arrived"] == 1500
        assert figures["peak_replicas"] <= 6
    assert results["fixed"]["worst"]["scale_events"] == 0
    for name in ("timeline.png", "ttft_cdf.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
