"""``shoal simulate --seeds N --bounds``: each seed is deterministic, the table and ``--json`` give each figure's
mean and worst seed, and the bounds (fixed-peak, reactive oracle, clairvoyant) run as rows beside the policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_fixtures import poisson_trace, small_profile

from shoal.cli import main
from shoal.simulate.compare import compare
from shoal.simulate.presets import generate
from shoal.simulate.profile import EngineProfile
from shoal.simulate.seeds import aggregate

PEERS = ["llmd-slo", "llmd-queue", "dynamo", "aibrix"]


def test_each_seed_gives_the_same_figures_for_every_peer_law_and_bound(profile: EngineProfile) -> None:
    def run(seed: int) -> dict[str, dict[str, object]]:
        trace = generate("flash-crowd", profile, seed=seed).head(1200)
        return compare(trace, profile, PEERS, slo_ttft_p95_s=1.0, seed=seed, bounds=True).results

    first = run(7)
    assert first == run(7)
    assert set(first) == {*PEERS, "fixed", "reactive-oracle", "clairvoyant"}
    assert first != run(8)


def test_the_summary_keeps_the_mean_and_the_worst_seed_of_each_figure(profile: EngineProfile) -> None:
    trace = poisson_trace(4.0, 800, seed=1)
    comparisons = [compare(trace, profile, ["hpa"], slo_ttft_p95_s=1.0, seed=s) for s in (0, 1, 2)]
    summary = aggregate(comparisons, [0, 1, 2])["hpa"]
    hours = [c.results["hpa"]["replica_hours"] for c in comparisons]
    attainment = [c.results["hpa"]["slo_attainment"] for c in comparisons]
    assert summary["mean"]["replica_hours"] == pytest.approx(sum(hours) / 3)  # type: ignore[index]
    assert summary["worst"]["replica_hours"] == max(hours)  # type: ignore[index]
    assert summary["worst"]["slo_attainment"] == min(attainment)  # type: ignore[index]
    assert set(summary["seeds"]) == {"0", "1", "2"}  # type: ignore[arg-type]


def _files(tmp_path: Path) -> list[str]:
    """``simulate`` arguments for a small trace file and profile."""
    trace = poisson_trace(5.0, 600, groups=2)
    csv = tmp_path / "trace.csv"
    csv.write_text(
        "timestamp,prompt_tokens,output_tokens\n"
        + "".join(
            f"{a},{p},{o}\n" for a, p, o in zip(trace.arrival, trace.prompt_tokens, trace.output_tokens, strict=True)
        )
    )
    profile = tmp_path / "profile.json"
    profile.write_text(small_profile().to_json())
    return ["simulate", "--trace", str(csv), "--profile", str(profile)]


def test_the_cli_prints_mean_and_worst_with_the_bounds_and_writes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    argv = [*_files(tmp_path), "--policies", "shoal,dynamo"]
    code = main([*argv, "--seeds", "2", "--bounds", "--json", str(out), "--no-progress"])
    assert code == 0
    table = capsys.readouterr().out.splitlines()
    header = next(line for line in table if line.startswith("policy"))
    assert {"SLO", "mean", "worst", "SLO-oracle", "h/clairv"} <= set(header.split())
    rows = {line.split()[0] for line in table[table.index(header) + 1 :]}
    assert rows == {"shoal", "dynamo", "fixed", "reactive-oracle", "clairvoyant"}
    results = json.loads(out.read_text())
    assert set(results["dynamo"]) == {"mean", "worst", "seeds"}
    assert set(results["dynamo"]["seeds"]) == {"0", "1"}


def test_a_seed_count_below_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", "steady", "--seeds", "0", "--no-progress"]) == 2
    assert "--seeds must be >= 1, got 0" in capsys.readouterr().err


def test_seeds_run_in_parallel_give_the_same_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*_files(tmp_path), "--policies", "shoal,kpa", "--seeds", "3", "--bounds", "--no-progress"]
    assert main([*argv, "--json", str(tmp_path / "one.json")]) == 0
    assert main([*argv, "--jobs", "2", "--json", str(tmp_path / "two.json")]) == 0
    one, two = (json.loads((tmp_path / name).read_text()) for name in ("one.json", "two.json"))
    assert one == two
    assert set(two["kpa"]["seeds"]) == {"0", "1", "2"}
    assert main([*argv, "--jobs", "0"]) == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err
