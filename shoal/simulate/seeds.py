"""A comparison over many seeds (``shoal simulate --seeds N``): each seed draws its own trace (for a generated one)
and its own start-up times, every policy runs on each, and each figure is reported as its mean and its worst seed,
since a policy tuned on one seed can be lucky on it.

Worst is the lowest SLO attainment and the most replica-hours, TTFT P95 and scale events; each is taken
separately (the worst seed for hours need not be the worst for attainment). With ``--bounds``, the table also
reads every policy as a fraction of what was possible: its mean attainment in points against the reactive
oracle's, and its mean replica-hours against the clairvoyant's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shoal.simulate.bounds import ORACLE_NAMES
from shoal.simulate.compare import Comparison

# figure -> True when higher is better (its worst seed is the lowest)
FIGURES = {
    "slo_attainment": True,
    "replica_hours": False,
    "standby_hours": False,
    "ttft_p95_s": False,
    "scale_events": False,
}


def _known(values: list[object]) -> list[float]:
    return [float(v) for v in values if v is not None]  # type: ignore[arg-type]


def aggregate(comparisons: Sequence[Comparison], seeds: Sequence[int]) -> dict[str, dict[str, object]]:
    """``{policy: {"mean": {figure: value}, "worst": {figure: value}, "seeds": {seed: every figure of that run}}}``;
    a figure no seed has (no window, nothing served) is None."""
    summary: dict[str, dict[str, object]] = {}
    for name in comparisons[0].results:
        runs = [c.results[name] for c in comparisons]
        mean: dict[str, float | None] = {}
        worst: dict[str, float | None] = {}
        for figure, higher_is_better in FIGURES.items():
            values = _known([r[figure] for r in runs])
            mean[figure] = float(np.mean(values)) if values else None
            worst[figure] = (min(values) if higher_is_better else max(values)) if values else None
        summary[name] = {
            "mean": mean,
            "worst": worst,
            "seeds": {str(seed): run for seed, run in zip(seeds, runs, strict=True)},
        }
    return summary


def format_seeds_table(summary: dict[str, dict[str, object]]) -> str:
    """Mean and worst seed per policy, and against the bounds when they ran."""
    oracle, clairvoyant = (summary.get(name) for name in ORACLE_NAMES)
    header = (
        f"{'policy':<16}{'SLO mean':>9}{'worst':>8}{'rep-h mean':>11}{'worst':>8}{'TTFT p95':>10}{'worst':>9}"
        f"{'ev mean':>8}"
    )
    if oracle and clairvoyant:
        header += f"{'SLO-oracle':>11}{'h/clairv':>9}"
    lines = [header]
    for name, row in summary.items():
        mean, worst = row["mean"], row["worst"]
        assert isinstance(mean, dict) and isinstance(worst, dict)
        line = (
            f"{name:<16}{_pct(mean['slo_attainment']):>9}{_pct(worst['slo_attainment']):>8}"
            f"{_num(mean['replica_hours']):>11}{_num(worst['replica_hours']):>8}"
            f"{_num(mean['ttft_p95_s'], 3):>10}{_num(worst['ttft_p95_s'], 3):>9}{_num(mean['scale_events'], 1):>8}"
        )
        if oracle and clairvoyant:
            line += f"{_points(mean['slo_attainment'], oracle):>11}{_ratio(mean['replica_hours'], clairvoyant):>9}"
        lines.append(line)
    return "\n".join(lines)


def _pct(value: object) -> str:
    return "n/a" if value is None else f"{100 * float(value):.1f}%"  # type: ignore[arg-type]


def _num(value: object, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{float(value):.{digits}f}"  # type: ignore[arg-type]


def _points(attainment: object, bound: dict[str, object]) -> str:
    reference = bound["mean"]["slo_attainment"]  # type: ignore[index]
    if attainment is None or reference is None:
        return "n/a"
    return f"{100 * (float(attainment) - float(reference)):+.1f}"  # type: ignore[arg-type]


def _ratio(hours: object, bound: dict[str, object]) -> str:
    reference = bound["mean"]["replica_hours"]  # type: ignore[index]
    if hours is None or not reference:
        return "n/a"
    return f"{float(hours) / float(reference):.2f}x"  # type: ignore[arg-type]
