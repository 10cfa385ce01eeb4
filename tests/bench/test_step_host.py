"""``bench/step_host.py --smoke`` runs as documented: for each batch size, a step's host time outside the forward
and per decoding sequence, and the aten ops of one step, as JSON with the CPU it ran on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "step_host.py"


def test_the_smoke_run_reports_host_time_per_step_and_per_sequence() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["cpu"] and report["commit"]
    assert [r["batch"] for r in report["results"]] == [1, 4]
    for result in report["results"]:
        assert result["steps"] == 4
        for key in ("step_ms", "forward_ms", "host_us_per_step", "host_cpu_us_per_step", "host_us_per_seq"):
            assert result[key] > 0, key
        assert result["host_us_per_seq"] * result["batch"] == pytest.approx(
            result["host_us_per_step"], rel=0.01, abs=0.05
        )
        assert result["forward_ms"] < result["step_ms"]
        assert 0 < result["aten_ops_outside_forward"] < result["aten_ops_per_step"]
        assert 0 < result["host_copies_outside_forward"] <= result["aten_ops_outside_forward"]
