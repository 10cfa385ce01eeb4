"""What any autoscaler could reach on a trace: oracles that read the trace's future, and fixed fleets of every size.

Issue 12 asks Shoal's policy for >= 99% of 1-minute windows within the TTFT-P95 SLO at <= 0.8x HPA's replica-hours.
Where that is out of reach for every policy that reacts to what it observes, this benchmark shows it, on the same
simulator, trace, profile, start-up draws and bounds as ``shoal simulate``:

- ``fixed-N``: N replicas throughout, for N from 1 to ``--replicas-max``: what each constant size buys. The
  largest is what any policy bounded by ``replicas.max`` could reach at best (more replicas never queue more).
- ``reactive-oracle`` and ``clairvoyant``: the oracles of :mod:`shoal.simulate.bounds` (``shoal simulate
  --bounds`` shows them beside the policies over many seeds; this benchmark adds every fixed size).

The load test sizes for Poisson arrivals of the trace's own requests; where a trace is burstier than that within
10 s (the Azure code trace), the oracles' sizing is too small and the fixed sizes are the evidence.

HPA-style runs in the same process as the baseline of the ratios.

    .venv/bin/python bench/simulate_oracle.py --trace bursty
"""

from __future__ import annotations

import argparse
import math

from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import make_policy
from shoal.simulate.bounds import oracles
from shoal.simulate.compare import compare
from shoal.simulate.presets import resolve_trace
from shoal.simulate.profile import DEFAULT_PROFILE, load_profile
from shoal.simulate.results import summarize_run
from shoal.simulate.simulator import SimConfig, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default="bursty")
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--slo-ttft-p95", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fixed", default=None, help="comma-separated fixed sizes (default: 1 to replicas max)")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    trace = resolve_trace(args.trace, profile, args.seed)
    baseline = compare(trace, profile, ["hpa"], args.slo_ttft_p95, seed=args.seed)
    capacity, config = baseline.capacity, baseline.config
    hpa = baseline.results["hpa"]
    hpa_hours = float(hpa["replica_hours"])  # type: ignore[arg-type]

    routing = "prefix-aware"
    rows: list[tuple[str, dict[str, object]]] = [("hpa", hpa)]
    for oracle in oracles(trace, profile, capacity, config.max_replicas):
        config_run = SimConfig(seed=args.seed, initial_replicas=oracle.initial_replicas())
        run = simulate(trace, profile, oracle, make_policy(routing), config_run)
        rows.append((oracle.name, summarize_run(run, args.slo_ttft_p95, trace.bursts)))
    sizes = range(1, config.max_replicas + 1) if args.fixed is None else [int(n) for n in args.fixed.split(",")]
    for n in sizes:
        run = simulate(
            trace, profile, FixedForPeak(n), make_policy(routing), SimConfig(seed=args.seed, initial_replicas=n)
        )
        rows.append((f"fixed-{n}", summarize_run(run, args.slo_ttft_p95, trace.bursts)))
    low, high = profile.startup_s
    print(
        f"trace {trace.name}, profile {profile.name}, start-up {low:.0f}-{high:.0f} s, one replica meets the SLO "
        f"up to {capacity.max_rps:.2f} req/s; replicas {config.min_replicas}..{config.max_replicas}"
    )
    print("| policy | SLO windows met | replica-hours | vs HPA |")
    print("|---|---|---|---|")
    for name, result in rows:
        attainment = result["slo_attainment"]
        hours = float(result["replica_hours"])  # type: ignore[arg-type]
        met = "n/a" if attainment is None else f"{100 * float(attainment):.1f}%"  # type: ignore[arg-type]
        ratio = f"{hours / hpa_hours:.2f}x" if hpa_hours and not math.isnan(hours) else "n/a"
        print(f"| {name} | {met} | {hours:.2f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
