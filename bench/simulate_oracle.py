"""What any autoscaler could reach on a trace: oracles that read the trace's future, and fixed fleets of every size.

Issue 12 asks Shoal's policy for >= 99% of 1-minute windows within the TTFT-P95 SLO at <= 0.8x HPA's replica-hours.
Where that is out of reach for every policy that reacts to what it observes, this benchmark shows it, on the same
simulator, trace, profile, start-up draws and bounds as ``shoal simulate``:

- ``fixed-N``: N replicas throughout, for N from 1 to ``--replicas-max``: what each constant size buys. The
  largest is what any policy bounded by ``replicas.max`` could reach at best (more replicas never queue more).
- ``reactive-oracle``: at every 10 s tick it sizes the fleet for the busiest minute so far, the one just starting
  included, read from the trace, at one replica's SLO capacity from the same load test the baselines are given
  (``shoal.simulate.sizing``), and never scales down. It learns of a step the instant it begins, without
  measurement lag or noise, and forgets no burst: what it cannot serve, no policy that must first observe a step
  serves (its replicas still take the profile's start-up, 60-300 s for the GPU profile). Its hours mean nothing.
- ``clairvoyant``: sizes for the busiest 10 s of the next ``start-up max + 60 s``, so replicas are ready before
  the load comes, and scales down as soon as that falls: what foresight buys.

The load test sizes for Poisson arrivals of the trace's own requests; where a trace is burstier than that within
10 s (the Azure code trace), the oracles' sizing is too small and the fixed sizes are the evidence.

HPA-style runs in the same process as the baseline of the ratios. Oracles read the trace, so they live here, not
in ``shoal.autoscale``.

    .venv/bin/python bench/simulate_oracle.py --trace bursty
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from shoal.autoscale import FleetSignals, ScalingDecision
from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import make_policy
from shoal.simulate.compare import compare
from shoal.simulate.presets import resolve_trace
from shoal.simulate.profile import DEFAULT_PROFILE, load_profile
from shoal.simulate.results import summarize_run
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.sizing import ReplicaCapacity, replicas_for

BIN_S = 10.0
MINUTE_S = 60.0


@dataclass
class Oracle:
    """Sizes the fleet for the busiest bin of ``bin_s`` seconds in ``[now, now + lookahead_s)`` of the trace, or,
    with ``memory``, in everything up to the bin that holds ``now``."""

    name: str
    per_bin: np.ndarray  # arrivals per second in each bin of the trace
    bin_s: float
    capacity: ReplicaCapacity
    lookahead_s: float
    max_replicas: int
    memory: bool = False
    period_seconds: float = 10.0

    def decide(self, signals: FleetSignals) -> ScalingDecision:
        now = int(signals.time // self.bin_s)
        first = 0 if self.memory else now
        window = self.per_bin[first : now + max(1, math.ceil(self.lookahead_s / self.bin_s))]
        rate = float(window.max()) if len(window) else 0.0
        target = min(replicas_for(rate, self.capacity), self.max_replicas)
        return ScalingDecision(signals.time, target, "Oracle", f"{self.name}: {rate:.3g} req/s ahead -> {target}")


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

    def rates(bin_s: float) -> np.ndarray:
        return np.bincount((trace.arrival // bin_s).astype(np.int64)) / bin_s

    routing = "prefix-aware"
    rows: list[tuple[str, dict[str, object]]] = [("hpa", hpa)]
    oracles = [
        Oracle("reactive-oracle", rates(MINUTE_S), MINUTE_S, capacity, MINUTE_S, config.max_replicas, True),
        Oracle("clairvoyant", rates(BIN_S), BIN_S, capacity, profile.startup_s[1] + MINUTE_S, config.max_replicas),
    ]
    for oracle in oracles:
        initial = oracle.decide(FleetSignals(time=0.0, desired=0)).replicas
        config_run = SimConfig(seed=args.seed, initial_replicas=initial)
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
