"""``bench/cpu_attention.py --smoke`` runs as documented: the machine's build of the C attention kernel against its
portable C build on the same decode batch, per call, with both builds' paths named and their outputs agreeing."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "cpu_attention.py"

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the flags are x86's")


def test_the_smoke_run_times_both_builds_on_one_batch() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["cpu"] and report["paths"]["portable"] == "portable C"
    [row] = report["rows"]
    assert (row["batch"], row["context"]) == (2, 40)
    assert row["native_us"] > 0 and row["portable_us"] > 0
    assert row["portable_over_native"] == pytest.approx(row["portable_us"] / row["native_us"], rel=0.05)
    assert row["max_abs_difference"] < 1e-4
