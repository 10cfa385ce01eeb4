"""Simulator speed at fleet scale: ``--replicas`` engines and ``--requests`` requests, timed.

A steady Poisson trace at ``--rate-per-replica`` for every replica (GPU-shaped profile, the presets' request
shapes), run under Shoal's autoscaler starting at ``--replicas`` ready replicas, once per routing policy.
Prints wall and CPU seconds of the full run (the simulator is one thread; on a shared machine its CPU seconds
are what it would take alone) and, as the baseline of the same invocation, the same run at a tenth of the
requests: the ratio of CPU per request shows whether the cost holds as the run grows. A third run, at a tenth
again, times the routing policy's own ``decide`` (the real object, behind a delegating wrapper that reads the
wall clock, ~0.5 us a read; CPU clocks cost ~3 us a read here, as much as round-robin's decision itself) and
gives its share of that run's wall time; the full run has no wrapper.

    .venv/bin/python bench/simulate_scale.py --replicas 1000 --requests 1000000
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence

import numpy as np

from shoal.autoscale import AutoscalingConfig, ShoalPolicy
from shoal.gateway.routing import Decision, ReplicaView, RouteRequest, RoutingPolicy, make_policy
from shoal.simulate.presets import request_shapes
from shoal.simulate.profile import load_profile
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.trace import Trace, make_trace


class TimedRouting:
    """Delegates to the real routing object and adds up the wall time its ``decide`` takes."""

    def __init__(self, inner: RoutingPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.indexed = getattr(inner, "indexed", False)  # the simulator keeps a FleetIndex for a policy that uses it
        self.wall_s = 0.0

    def decide(self, replicas: Sequence[ReplicaView], request: RouteRequest) -> Decision:
        start = time.perf_counter()
        decision = self.inner.decide(replicas, request)
        self.wall_s += time.perf_counter() - start
        return decision


def trace_for(replicas: int, requests: int, rate_per_replica: float, seed: int) -> Trace:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / (rate_per_replica * replicas), requests))
    return make_trace("scale", arrival, *request_shapes(rng, requests))


def timed(
    replicas: int, requests: int, routing: str, rate_per_replica: float, seed: int, time_routing: bool = False
) -> dict[str, float]:
    profile = load_profile("gpu-8b-h100-derived")
    trace = trace_for(replicas, requests, rate_per_replica, seed)
    config = AutoscalingConfig(min_replicas=1, max_replicas=2 * replicas, ttft_p95_seconds=2.0)
    policy = make_policy(routing)
    router = TimedRouting(policy) if time_routing else policy
    wall, cpu = time.perf_counter(), time.process_time()
    run = simulate(trace, profile, ShoalPolicy(config), router, SimConfig(seed=seed, initial_replicas=replicas))
    wall = time.perf_counter() - wall
    return {
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu,
        "routing_share": router.wall_s / wall if isinstance(router, TimedRouting) else math.nan,
        "served": int((~np.isnan(run.finish)).sum()),
        "simulated_s": run.end_time,
        "peak_replicas": int(run.timeline[:, 1].max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--routing", default="round-robin,prefix-aware")
    parser.add_argument("--rate-per-replica", type=float, default=15.0, help="req/s per replica (GPU profile)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for routing in args.routing.split(","):
        base = timed(args.replicas, args.requests // 10, routing, args.rate_per_replica, args.seed)
        share = timed(args.replicas, args.requests // 10, routing, args.rate_per_replica, args.seed, True)
        full = timed(args.replicas, args.requests, routing, args.rate_per_replica, args.seed)
        print(
            f"{routing}: {args.replicas} replicas, {args.requests} requests ({full['simulated_s']:.0f} s simulated, "
            f"{full['served']} served, peak {full['peak_replicas']}): wall {full['wall_s']:.1f} s, CPU "
            f"{full['cpu_s']:.1f} s ({args.requests / full['cpu_s']:,.0f} req/s); CPU per request vs a tenth of "
            f"the requests ({base['cpu_s']:.1f} s): {full['cpu_s'] / (10 * base['cpu_s']):.2f}x; routing decide "
            f"{share['routing_share']:.0%} of a tenth's wall time",
            flush=True,
        )


if __name__ == "__main__":
    main()
