"""``bench/structured_output.py`` runs as documented, small: both modes generate every token, half the requests
of the constrained mode follow the schema (the script checks both), and the report carries both rates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from serve_harness import build_tiny_model

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "structured_output.py"


def test_the_benchmark_reports_both_modes_on_a_tiny_model(tmp_path: Path) -> None:
    model = build_tiny_model(tmp_path / "model")
    argv = [sys.executable, str(SCRIPT), "--model", str(model), "--requests", "4", "--output-len", "8", "--rounds", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert (report["requests"], report["constrained"], report["output_len"]) == (4, 2, 8)
    for mode in ("none_constrained", "half_constrained"):
        assert report[mode]["output_tok_per_s"] > 0 and report[mode]["output_tok_per_cpu_s"] > 0
    assert report["half_over_none_tok_per_s"] > 0
