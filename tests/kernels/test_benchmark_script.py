"""bench/kernels.py runs end to end: its GPU code path on tiny shapes under the interpreter (--smoke)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from kernel_lane import interpreter_only

# on a GPU host the kernels are already compiled in this process: run bench/kernels.py itself there
pytestmark = [pytest.mark.interpret, interpreter_only, pytest.mark.timeout(120)]

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "kernels.py"


def test_kernel_benchmark_prints_its_tables_in_smoke_mode(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)

    assert bench.main(["--smoke"]) == 0

    out = capsys.readouterr().out
    assert "| 2 x 80 |" in out and "| 2 x 40 |" in out
    assert "| decode, 2 x 80, 24, - |" in out and "| prefill, 2 x 40, 16, 2.0 |" in out
    assert "GB/s" in out and "TFLOP/s" in out and "max err" in out and "FAILED" not in out
