"""``shoal simulate``: replay a trace against a simulated fleet under each autoscaling policy and compare them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal.simulate.compare import Comparison
    from shoal.simulate.profile import EngineProfile
    from shoal.simulate.startup_modes import StartupMode


def register(subparsers: argparse._SubParsersAction) -> None:
    from shoal.engine_kinds import ENGINE_KINDS
    from shoal.simulate.policies import POLICY_NAMES
    from shoal.simulate.presets import PRESETS

    p = subparsers.add_parser("simulate", help="Compare autoscaling policies on a trace in a simulated fleet.")
    p.add_argument(
        "--trace",
        required=True,
        help=f"{', '.join(PRESETS)}, or a trace file (CSV, JSONL or the Azure TIMESTAMP,ContextTokens,GeneratedTokens"
        " CSV)",
    )
    p.add_argument(
        "--slo-ttft-p95",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="the TTFT P95 target every 1-minute window should meet (default 2.0)",
    )
    p.add_argument(
        "--profile",
        default=None,
        metavar="PATH",
        help="engine profile: gpu-8b-h100-derived (default), llama3-8b-h100, smollm2-135m-cpu, or a profile JSON file",
    )
    p.add_argument(
        "--replicas-max",
        type=int,
        default=None,
        metavar="N",
        help="most replicas (default: twice what the trace's peak needs)",
    )
    p.add_argument("--replicas-min", type=int, default=1, metavar="N")
    p.add_argument("--seed", type=int, default=0, help="the first seed (trace draws and start-up times)")
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="run every policy over N seeds from --seed; the table shows each figure's mean and worst seed",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run the seeds in N processes at once (default 1); the figures do not depend on it",
    )
    p.add_argument(
        "--bounds",
        action="store_true",
        help="add the fixed-peak fleet, the reactive oracle and the clairvoyant as rows",
    )
    p.add_argument(
        "--json",
        dest="json_out",
        default=None,
        metavar="OUT",
        help="write {policy: {mean, worst, seeds: {seed: figures}}} here",
    )
    p.add_argument(
        "--plots", default=None, metavar="DIR", help="write PNG plots (of the first seed) into this directory"
    )
    p.add_argument(
        "--policies",
        default=",".join(POLICY_NAMES),
        help=f"comma-separated, from {', '.join(POLICY_NAMES)} (default: all)",
    )
    p.add_argument("--routing", default="prefix-aware", help="round-robin, least-load or prefix-aware")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="replay the trace this many times faster (2: an hour of traffic in 30 minutes)",
    )
    p.add_argument("--max-step", type=int, default=None, help="Shoal's maxStep (default: the CRD's default)")
    p.add_argument(
        "--season-seconds",
        type=float,
        default=86400.0,
        metavar="SECONDS",
        help="shoal-predictive's season, autoscaling.predictive.seasonSeconds (default 86400: a day)",
    )
    p.add_argument(
        "--burst-memory-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Shoal's autoscaling.burstMemorySeconds (default: the CRD's, 1800; 0: bursts forgotten at once)",
    )
    p.add_argument("--max-num-seqs", type=int, default=None, help="engine batch size (default: the profile's)")
    p.add_argument(
        "--max-num-batched-tokens", type=int, default=None, help="engine token budget per step (default: the profile's)"
    )
    p.add_argument(
        "--engine-kind",
        default="shoal",
        choices=ENGINE_KINDS,
        help="whose metrics the autoscaler reads: a kind without a series (llamacpp: TTFT, finished requests, KV "
        "usage) leaves that signal missing, as on a cluster",
    )
    p.add_argument(
        "--startup-mode",
        default="cold",
        choices=("cold", "cached", "standby"),
        help="how a new replica starts: cold (pull, fetch, load, warm up: the profile's startup_s), cached (weights "
        "and image on the node: load and warm-up only) or standby (promoted from a pool of --standby loaded, "
        "unrouted replicas, counted in replica-hours)",
    )
    p.add_argument(
        "--standby", type=int, default=0, metavar="N", help="the standby pool's size (--startup-mode standby)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=_simulate)


def _progress_bars(total: float, enabled: bool) -> Callable[[str], Callable[[float], None] | None]:
    """A tqdm bar per policy over simulated seconds (tqdm is optional: without it, no bar)."""

    def make(policy: str) -> Callable[[float], None] | None:
        if not enabled:
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        bar = tqdm(total=round(total), desc=policy, unit="sim-s", file=sys.stderr, leave=False)

        def update(now: float) -> None:
            bar.update(max(0, round(min(now, total)) - bar.n))
            if bar.n >= round(total):
                bar.close()

        return update

    return make


def _compare_seed(args: argparse.Namespace, profile: EngineProfile, startup: StartupMode, seed: int) -> Comparison:
    """One seed's comparison (in a worker process with ``--jobs``: no progress bar there, they would interleave)."""
    from shoal.simulate.compare import compare
    from shoal.simulate.presets import resolve_trace

    trace = resolve_trace(args.trace, profile, seed)
    if args.time_scale != 1.0:
        trace = trace.scaled(args.time_scale)
    print(
        f"seed {seed}: trace {trace.name}: {len(trace)} requests over {trace.duration / 60:.1f} min; "
        f"profile {profile.name}; start-up {startup.label()}",
        file=sys.stderr,
    )
    return compare(
        trace,
        profile,
        [name.strip() for name in args.policies.split(",") if name.strip()],
        args.slo_ttft_p95,
        args.routing,
        args.replicas_min,
        args.replicas_max,
        seed,
        args.max_step,
        _progress_bars(trace.duration, args.progress and args.jobs == 1),
        args.engine_kind,
        args.bounds,
        startup,
        args.season_seconds,
        args.burst_memory_seconds,
    )


def _simulate(args: argparse.Namespace) -> int:
    import json
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    from shoal.simulate.compare import format_table
    from shoal.simulate.profile import DEFAULT_PROFILE, ProfileError, load_profile
    from shoal.simulate.seeds import aggregate, format_seeds_table
    from shoal.simulate.startup_modes import StartupMode
    from shoal.simulate.trace import TraceError

    try:
        profile = load_profile(args.profile or DEFAULT_PROFILE)
        if args.max_num_seqs is not None or args.max_num_batched_tokens is not None:
            profile = profile.with_engine(args.max_num_batched_tokens, args.max_num_seqs)
        if args.slo_ttft_p95 <= 0:
            raise ValueError(f"--slo-ttft-p95 must be > 0, got {args.slo_ttft_p95}")
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        if args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
        if args.burst_memory_seconds is not None and args.burst_memory_seconds < 0:
            raise ValueError(f"--burst-memory-seconds must be >= 0, got {args.burst_memory_seconds:g}")
        seeds = list(range(args.seed, args.seed + args.seeds))
        run = partial(_compare_seed, args, profile, StartupMode(args.startup_mode, args.standby))
        if args.jobs == 1 or len(seeds) == 1:
            comparisons = [run(seed) for seed in seeds]
        else:
            with ProcessPoolExecutor(min(args.jobs, len(seeds))) as pool:
                comparisons = list(pool.map(run, seeds))
    except (TraceError, ProfileError, ValueError) as exc:
        print(f"shoal simulate: error: {exc}", file=sys.stderr)
        return 2
    comparison = comparisons[0]
    summary = aggregate(comparisons, seeds)
    cap = comparison.capacity
    print(
        f"one replica meets the SLO up to {cap.max_rps:.2f} req/s ({cap.concurrency:.1f} requests in the engine); "
        f"peak needs {comparison.sizing.peak_replicas}; replicas {comparison.config.min_replicas}.."
        f"{comparison.config.max_replicas}"
    )
    print(format_table(comparison) if len(seeds) == 1 else format_seeds_table(summary))
    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(summary, out, indent=2)
    if args.plots:
        from shoal.simulate.plots import write_plots

        for path in write_plots(comparison, args.plots):
            print(f"wrote {path}")
    return 0
