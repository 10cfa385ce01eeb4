"""``bench/autoscale_targets.py``: runs of different policies on the same seeds read as one table; other seeds
are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "autoscale_targets.py"


def _row(slo: float, hours: float, seeds: tuple[str, ...] = ("0", "1")) -> dict:
    figures = {"slo_attainment": slo, "replica_hours": hours}
    return {"mean": figures, "worst": figures, "seeds": {seed: figures for seed in seeds}}


def _run(tmp_path: Path, *files: dict, policies: str = "shoal") -> subprocess.CompletedProcess[str]:
    paths = []
    for i, summary in enumerate(files):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(summary))
        paths.append(str(path))
    argv = [sys.executable, str(BENCH), "ramp=" + "+".join(paths), "--policies", policies]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_a_shoal_run_and_a_peers_run_make_one_table(tmp_path: Path) -> None:
    shoal = {
        "shoal": _row(0.96, 4.0),
        "fixed": _row(1.0, 6.0),
        "reactive-oracle": _row(0.6, 3.6),
        "clairvoyant": _row(1.0, 4.2),
    }
    peers = {name: _row(0.9, 5.0) for name in ("hpa", "keda", "kpa", "llmd-slo", "llmd-queue", "dynamo", "aibrix")}
    peers["fixed"] = _row(0.5, 1.0)  # a policy in both runs keeps the first run's figures
    result = _run(tmp_path, shoal, peers)
    assert result.returncode == 0, result.stderr
    assert "| `hpa` | 90.0% |" in result.stdout and "| `fixed` | 100.0% |" in result.stdout
    # 96% at 4.0 h against the fixed fleet's 6.0 h: 0.67x, the ramp target met; 0.95x the clairvoyant's hours
    assert "| ramp | `shoal` | met (+36.0 pt vs oracle) | met (0.95x clairvoyant's hours) | met (96.0% at 0.67x" in (
        result.stdout
    )


def test_runs_on_other_seeds_are_refused(tmp_path: Path) -> None:
    result = _run(tmp_path, {"shoal": _row(0.9, 4.0)}, {"hpa": _row(0.9, 4.0, seeds=("0", "1", "2"))})
    assert result.returncode != 0 and "different seeds" in result.stderr


def test_a_policy_not_run_on_a_trace_is_left_out_of_its_verdicts(tmp_path: Path) -> None:
    """``--policies shoal,shoal-predictive`` over traces where only one had the predictive policy run."""
    bounds = {"fixed": _row(1.0, 6.0), "reactive-oracle": _row(0.6, 3.6), "clairvoyant": _row(1.0, 4.2)}
    peers = {name: _row(0.9, 5.0) for name in ("hpa", "keda", "kpa", "llmd-slo", "llmd-queue", "dynamo", "aibrix")}
    result = _run(tmp_path, {"shoal": _row(0.96, 4.0), **bounds}, peers, policies="shoal,shoal-predictive")
    assert result.returncode == 0, result.stderr
    assert "| ramp | `shoal` |" in result.stdout and "`shoal-predictive`" not in result.stdout


def test_a_run_without_the_peers_gives_the_verdicts_it_can(tmp_path: Path) -> None:
    """Shoal and the bounds alone (``--bounds --policies shoal``): the peers' verdicts say they were not run."""
    bounds = {"fixed": _row(1.0, 6.0), "reactive-oracle": _row(0.6, 3.6), "clairvoyant": _row(1.0, 4.2)}
    result = _run(tmp_path, {"shoal": _row(0.96, 4.0), **bounds})
    assert result.returncode == 0, result.stderr
    assert "| ramp | `shoal` | met (+36.0 pt vs oracle) |" in result.stdout
    assert result.stdout.rstrip().endswith("| - (no peer law run) |")
