"""The routing scenario of issue 12 in the simulator: prefix affinity against balance, per routing policy.

SmolLM2-on-CPU engines (the calibrated ``smollm2-135m-cpu`` profile), ``--groups`` groups of chats sharing a
``--prefix-len``-token system prompt, Poisson arrivals at the rate that keeps about ``--in-flight`` requests in
the fleet (Little's law on a first pass), ``--replicas`` replicas fixed. For each routing policy: the prefix
hit rate (prompt tokens served from cache) as a ratio to one replica's on the same trace (the baseline of the
same run: a single replica sees every group), the max/mean requests per replica, and TTFT p95 as a ratio to
round-robin's. Targets (issue 12): max/mean at most 1.3 with the hit rate at least 0.9x one replica's.

    .venv/bin/python bench/simulate_routing.py
"""

from __future__ import annotations

import argparse

import numpy as np

from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import make_policy
from shoal.simulate.profile import load_profile
from shoal.simulate.results import summarize_run
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.trace import Trace, make_trace


def chats(
    requests: int, groups: int, prefix_len: int, suffix_len: int, output_len: int, rate: float, seed: int
) -> Trace:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, requests))
    group = rng.integers(0, groups, requests)
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
    parser.add_argument("--in-flight", type=float, default=8.0)
    parser.add_argument("--max-num-seqs", type=int, help="the engines' limit (default: the profile's)")
    parser.add_argument("--max-num-batched-tokens", type=int, help="the engines' token budget (default: the profile's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    profile = load_profile(args.profile).with_engine(args.max_num_batched_tokens, args.max_num_seqs)

    def run(trace: Trace, replicas: int, routing: str) -> dict:
        result = simulate(
            trace,
            profile,
            FixedForPeak(replicas),
            make_policy(routing),
            SimConfig(seed=args.seed, initial_replicas=replicas),
        )
        return summarize_run(result, slo_ttft_p95_s=1e9)

    probe = chats(args.requests, args.groups, args.prefix_len, args.suffix_len, args.output_len, 1.0, args.seed)
    first = run(probe, args.replicas, "round-robin")
    latency = first["ttft_p50_s"] + first["itl_p50_s"] * args.output_len  # rough time in the system at 1 req/s
    trace = chats(
        args.requests,
        args.groups,
        args.prefix_len,
        args.suffix_len,
        args.output_len,
        args.in_flight / latency,
        args.seed,
    )
    single = run(trace, 1, "round-robin")
    rows = {name: run(trace, args.replicas, name) for name in ("round-robin", "least-load", "prefix-aware")}
    print(
        f"{args.requests} requests at {args.in_flight / latency:.2f} req/s (~{args.in_flight:g} in flight), "
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
