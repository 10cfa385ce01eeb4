"""Issue 33's autoscaling targets, read off `shoal simulate --seeds N --bounds --json OUT` results.

    bench/autoscale_targets.py ramp=ramp.json weekly=weekly.json ... [--policies shoal,shoal-predictive]
    bench/autoscale_targets.py ramp=shoal-ramp.json+peers-ramp.json ...

Several files for one trace (joined by ``+``) are one table: runs of other policies on the same trace, profile
and seeds (each policy's figures depend only on those), refused when their seeds differ.

Prints, per trace, the table docs/simulator.md shows (mean and worst seed, against the bounds) and then one row
per trace and Shoal policy saying which target it meets, from the means:

- attainment within 1 point of the reactive oracle's (or above it);
- replica-hours at most 1.2x the clairvoyant's;
- on a ramp trace: at least 95% attainment at most 0.70x the fixed-peak fleet's hours;
- on a diurnal trace (diurnal, weekly): at least 25% fewer hours than HPA and each KEDA recipe (keda, llmd-slo,
  llmd-queue) at equal or better attainment;
- the best attainment per replica-hour of every peer law.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PEERS = ("hpa", "keda", "kpa", "llmd-slo", "llmd-queue", "dynamo", "aibrix")
KEDA_RECIPES = ("hpa", "keda", "llmd-slo", "llmd-queue")
RAMPS, DIURNAL = ("ramp",), ("diurnal", "weekly")


def _mean(summary: dict, policy: str, figure: str) -> float:
    return float(summary[policy]["mean"][figure])


def _per_hour(summary: dict, policy: str) -> float:
    return 100 * _mean(summary, policy, "slo_attainment") / _mean(summary, policy, "replica_hours")


def merged(summaries: list[dict]) -> dict:
    """One summary of several runs' policies; a policy in several keeps its first; the seeds must agree."""
    seeds = {tuple(sorted(row["seeds"])) for summary in summaries for row in summary.values()}
    if len(seeds) > 1:
        raise SystemExit(f"the runs to merge used different seeds: {sorted(seeds)}")
    out: dict = {}
    for summary in summaries:
        for name, row in summary.items():
            out.setdefault(name, row)
    return out


def table(summary: dict) -> str:
    """The per-trace table: mean and worst seed, and each row against the bounds."""
    oracle = _mean(summary, "reactive-oracle", "slo_attainment")
    clairvoyant = _mean(summary, "clairvoyant", "replica_hours")
    fixed = _mean(summary, "fixed", "replica_hours")
    lines = [
        "| policy | SLO windows met, mean | worst seed | replica-hours, mean | worst seed | vs oracle (points) "
        "| hours / clairvoyant | hours / fixed-peak | SLO per replica-hour |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in summary.items():
        mean, worst = row["mean"], row["worst"]
        hours = mean["replica_hours"]
        lines.append(
            f"| `{name}` | {100 * mean['slo_attainment']:.1f}% | {100 * worst['slo_attainment']:.1f}% | {hours:.2f} "
            f"| {worst['replica_hours']:.2f} | {100 * (mean['slo_attainment'] - oracle):+.1f} "
            f"| {hours / clairvoyant:.2f}x | {hours / fixed:.2f}x | {_per_hour(summary, name):.1f} |"
        )
    return "\n".join(lines)


def targets(trace: str, summary: dict, policy: str) -> list[str]:
    """One verdict per target that applies to ``trace``: 'met' or 'not met', with the figures behind it."""
    slo, hours = _mean(summary, policy, "slo_attainment"), _mean(summary, policy, "replica_hours")
    oracle = _mean(summary, "reactive-oracle", "slo_attainment")
    clairvoyant = _mean(summary, "clairvoyant", "replica_hours")
    verdicts = [
        _verdict(slo >= oracle - 0.01, f"{100 * (slo - oracle):+.1f} pt vs oracle"),
        _verdict(hours <= 1.2 * clairvoyant, f"{hours / clairvoyant:.2f}x clairvoyant's hours"),
    ]
    if trace in RAMPS:
        fixed = _mean(summary, "fixed", "replica_hours")
        verdicts.append(
            _verdict(slo >= 0.95 and hours <= 0.70 * fixed, f"{100 * slo:.1f}% at {hours / fixed:.2f}x fixed-peak")
        )
    if trace in DIURNAL and not all(peer in summary for peer in KEDA_RECIPES):
        verdicts.append("- (HPA and the KEDA recipes not all run)")
    elif trace in DIURNAL:
        ok = all(
            hours <= 0.75 * _mean(summary, peer, "replica_hours") and slo >= _mean(summary, peer, "slo_attainment")
            for peer in KEDA_RECIPES
        )
        ratios = ", ".join(f"{peer} {hours / _mean(summary, peer, 'replica_hours'):.2f}x" for peer in KEDA_RECIPES)
        verdicts.append(_verdict(ok, f"hours vs {ratios}"))
    peers = [peer for peer in PEERS if peer in summary]
    if not peers:
        verdicts.append("- (no peer law run)")
        return verdicts
    best_peer = max(peers, key=lambda peer: _per_hour(summary, peer))
    mine, theirs = _per_hour(summary, policy), _per_hour(summary, best_peer)
    tied = " (tied)" if round(mine, 1) == round(theirs, 1) else ""
    verdicts.append(_verdict(round(mine, 1) >= round(theirs, 1), f"{mine:.1f} per h vs {best_peer} {theirs:.1f}{tied}"))
    return verdicts


def _verdict(met: bool, detail: str) -> str:
    return f"{'met' if met else '**not met**'} ({detail})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", metavar="TRACE=JSON")
    parser.add_argument("--policies", default="shoal,shoal-predictive")
    args = parser.parse_args()
    loaded = {}
    for item in args.results:
        trace, _, paths = item.partition("=")
        loaded[trace] = merged([json.loads(Path(path).read_text()) for path in paths.split("+")])
    for trace, summary in loaded.items():
        print(f"\n`{trace}`:\n\n{table(summary)}")
    print(
        "\n| trace | policy | vs reactive oracle | hours vs clairvoyant | trace's own target | best per replica-hour |"
    )
    print("|---|---|---|---|---|---|")
    for trace, summary in loaded.items():
        for policy in args.policies.split(","):
            if policy not in summary:  # e.g. shoal-predictive, run only on the trace that has a season
                continue
            found = targets(trace, summary, policy)
            own = found[2] if len(found) == 4 else "-"
            print(f"| {trace} | `{policy}` | {found[0]} | {found[1]} | {own} | {found[-1]} |")


if __name__ == "__main__":
    main()
