"""The routing scenario of issue 12 in the simulator: prefix affinity against balance, per routing policy.

SmolLM2-on-CPU engines (the calibrated ``smollm2-135m-cpu`` profile), ``--groups`` groups of chats sharing a
``--prefix-len``-token system prompt, Poisson arrivals at the rate that keeps ``--in-flight`` requests in the
fleet on average under round-robin (found by fixed-point iteration on Little's law: a first pass at 1 req/s
underestimated the time a request spends once batches grow, and put 10-18 requests in flight instead of 8),
or at ``--rate``; ``--replicas`` replicas fixed. For each routing policy: the prefix
hit rate (prompt tokens served from cache) as a ratio to one replica's on the same trace (the baseline of the
same run: a single replica sees every group), the max/mean requests per replica, and TTFT p95 as a ratio to
round-robin's. Targets (issue 12): max/mean at most 1.3 with the hit rate at least 0.9x one replica's.
Several ``--seed`` values print one line per seed and how many met each target.

    .venv/bin/python bench/simulate_routing.py
    .venv/bin/python bench/simulate_routing.py --max-num-seqs 4 --max-num-batched-tokens 512 --requests 64 \
        --prefix-len 385 --suffix-len 60 --seed $(seq 0 59) [--equal-groups]
"""

from __future__ import annotations

import argparse

import numpy as np

from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import make_policy
from shoal.simulate.profile import EngineProfile, load_profile
from shoal.simulate.results import summarize_run
from shoal.simulate.simulator import SimConfig, SimRun, simulate
from shoal.simulate.trace import Trace, make_trace


def chats(
    requests: int,
    groups: int,
    prefix_len: int,
    suffix_len: int,
    output_len: int,
    rate: float,
    seed: int,
    equal_groups: bool = False,
) -> Trace:
    """Poisson arrivals of chats, each in a random group (``equal_groups``: every group the same number, shuffled,
    as the gateway benchmark's closed loop sends them)."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, requests))
    group = rng.permutation(np.arange(requests) % groups) if equal_groups else rng.integers(0, groups, requests)
    suffix = rng.integers(suffix_len // 2, suffix_len * 3 // 2 + 1, requests)
    output = rng.integers(output_len // 2, output_len * 3 // 2 + 1, requests)
    return make_trace("chats", arrival, prefix_len + suffix, output, group, np.full(requests, prefix_len))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smollm2-135m-cpu")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--prefix-len", type=int, default=450)
    parser.add_argument("--suffix-len", type=int, default=40)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument(
        "--equal-groups",
        action="store_true",
        help="every group the same size (default: each request's group at random)",
    )
    parser.add_argument("--in-flight", type=float, default=8.0, help="requests in the fleet on average")
    parser.add_argument("--rate", type=float, help="arrivals per second instead of the rate found for --in-flight")
    parser.add_argument("--max-num-seqs", type=int, help="the engines' limit (default: the profile's)")
    parser.add_argument("--max-num-batched-tokens", type=int, help="the engines' token budget (default: the profile's)")
    parser.add_argument("--seed", type=int, nargs="+", default=[0], help="one or more seeds")
    args = parser.parse_args()
    profile = load_profile(args.profile).with_engine(args.max_num_batched_tokens, args.max_num_seqs)
    if len(args.seed) == 1:
        compare(args, profile, args.seed[0])
    else:
        count_met(args, profile)


def count_met(args: argparse.Namespace, profile: EngineProfile) -> None:
    """One line per seed for prefix-aware, then how many seeds met the targets."""
    met = {"hit rate and balance": 0, "all three": 0}
    for seed in args.seed:
        single, rows, _, _ = measure(args, profile, seed)
        r, base = rows["prefix-aware"], rows["round-robin"]["ttft_p95_s"]
        hit = r["prefix_hit_rate"] / single["prefix_hit_rate"]
        balance, ttft = r["routing"]["max_over_mean_requests"], r["ttft_p95_s"] / base
        both = hit >= 0.9 and balance <= 1.3
        met["hit rate and balance"] += both
        met["all three"] += both and ttft <= 1.0
        print(f"seed {seed}: prefix-aware hit {hit:.3f}x, max/mean {balance:.2f}, TTFT p95 {ttft:.2f}x round-robin's")
    print(", ".join(f"{name}: {count} of {len(args.seed)} seeds" for name, count in met.items()))


def measure(args: argparse.Namespace, profile: EngineProfile, seed: int) -> tuple[dict, dict[str, dict], float, float]:
    """One seed: one replica's run, each routing policy's run over ``--replicas``, the arrival rate used and the
    requests in flight it gives under round-robin."""

    def simulated(trace: Trace, replicas: int, routing: str) -> SimRun:
        return simulate(
            trace,
            profile,
            FixedForPeak(replicas),
            make_policy(routing),
            SimConfig(seed=seed, initial_replicas=replicas),
        )

    def run(trace: Trace, replicas: int, routing: str) -> dict:
        return summarize_run(simulated(trace, replicas, routing), slo_ttft_p95_s=1e9)

    def mean_in_flight(trace: Trace, replicas: int, routing: str) -> float:
        """Requests in the fleet on average over the run (Little's law on the simulated times)."""
        result = simulated(trace, replicas, routing)
        spent = result.finish - result.arrival
        return float(np.nansum(spent) / (np.nanmax(result.finish) - result.arrival[0]))

    def trace_at(rate: float) -> Trace:
        return chats(
            args.requests, args.groups, args.prefix_len, args.suffix_len, args.output_len, rate, seed, args.equal_groups
        )

    rate = args.rate or 1.0
    for _ in range(0 if args.rate else 12):
        in_flight = mean_in_flight(trace_at(rate), args.replicas, "round-robin")
        if abs(in_flight - args.in_flight) < 0.02 * args.in_flight:
            break
        rate *= args.in_flight / in_flight
    trace = trace_at(rate)
    single = run(trace, 1, "round-robin")
    rows = {name: run(trace, args.replicas, name) for name in ("round-robin", "least-load", "prefix-aware")}
    return single, rows, rate, mean_in_flight(trace, args.replicas, "round-robin")


def compare(args: argparse.Namespace, profile: EngineProfile, seed: int) -> None:
    """One seed's table: every routing policy against one replica's hit rate and round-robin's TTFT."""
    single, rows, rate, in_flight = measure(args, profile, seed)
    print(
        f"{args.requests} requests at {rate:.2f} req/s ({in_flight:.1f} in flight under round-robin), "
        f"{args.groups} groups x {args.prefix_len}-token prefixes, {args.replicas} replicas, profile {profile.name}; "
        f"one replica's hit rate {single['prefix_hit_rate']:.3f}"
    )
    print("| routing | hit rate | vs one replica | max/mean requests | TTFT p95 (s) | vs round-robin | reasons |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = rows["round-robin"]["ttft_p95_s"]
    for name, r in rows.items():
        print(
            f"| {name} | {r['prefix_hit_rate']:.3f} | {r['prefix_hit_rate'] / single['prefix_hit_rate']:.2f}x | "
            f"{r['routing']['max_over_mean_requests']:.2f} | {r['ttft_p95_s']:.3f} | {r['ttft_p95_s'] / base:.2f}x | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(r['routing']['reasons'].items()))} |"
        )


if __name__ == "__main__":
    main()
