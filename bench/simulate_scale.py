"""Simulator speed at fleet scale: ``--replicas`` engines and ``--requests`` requests, timed.

A steady Poisson trace sized to keep the fleet at ``--utilization`` of its load-tested capacity (GPU-shaped
profile, the bursty preset's request shapes), run once per routing policy under Shoal's autoscaler starting at
``--replicas`` ready replicas. Prints wall time, requests and events per second, and the same run at a tenth of
the requests as the baseline measured in the same invocation (the ratio shows whether the cost per request
holds as the run grows).

    .venv/bin/python bench/simulate_scale.py --replicas 1000 --requests 1000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from shoal.autoscale import AutoscalingConfig, ShoalPolicy
from shoal.gateway.routing import make_policy
from shoal.simulate.presets import _shapes
from shoal.simulate.profile import load_profile
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.trace import make_trace


def trace_for(replicas: int, requests: int, rate_per_replica: float, seed: int):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / (rate_per_replica * replicas), requests))
    return make_trace("scale", arrival, *_shapes(rng, requests))


def timed(replicas: int, requests: int, routing: str, rate_per_replica: float, seed: int) -> tuple[float, dict]:
    profile = load_profile("gpu-8b-h100")
    trace = trace_for(replicas, requests, rate_per_replica, seed)
    config = AutoscalingConfig(min_replicas=1, max_replicas=2 * replicas, ttft_p95_seconds=2.0)
    start = time.perf_counter()
    run = simulate(trace, profile, ShoalPolicy(config), make_policy(routing), SimConfig(seed=seed,
                                                                                          initial_replicas=replicas))
    elapsed = time.perf_counter() - start
    served = int((~np.isnan(run.finish)).sum())
    return elapsed, {"served": served, "simulated_s": run.end_time, "decisions": len(run.decisions),
                     "peak": int(run.timeline[:, 1].max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--routing", default="round-robin,prefix-aware")
    parser.add_argument("--rate-per-replica", type=float, default=15.0, help="req/s per replica (GPU profile)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for routing in args.routing.split(","):
        base_s, _ = timed(args.replicas, args.requests // 10, routing, args.rate_per_replica, args.seed)
        full_s, info = timed(args.replicas, args.requests, routing, args.rate_per_replica, args.seed)
        print(f"{routing}: {args.replicas} replicas, {args.requests} requests in {full_s:.1f} s "
              f"({args.requests / full_s:,.0f} req/s; {info}); a tenth of the requests took {base_s:.1f} s, "
              f"per-request cost ratio {full_s / (10 * base_s):.2f}x")


if __name__ == "__main__":
    main()
