"""One GPU engine against its simulated twin: Poisson load at several rates, TTFT and TPOT side by side.

The fidelity check of a measured GPU profile, on a machine where nothing else runs (``bench/simulate_fidelity.py``
does the fleet-level check on the shared CPU machine, where the neighbours' load blurs it). Two steps:

- ``measure`` (on the GPU machine): starts one ``shoal serve`` as ``bench/simulate_calibrate.py`` does, sends
  ``shoal bench serve`` Poisson load of random prompts at each of ``--rates``, and writes each run's JSON.
- ``compare`` (anywhere): rebuilds each run's trace (arrivals from the load generator's own seeded gamma process,
  ``shoal.loadgen.arrivals``; prompt tokens as the engine counted them; the output length asked for) and replays it
  in the simulator against one replica of ``--profile``, then prints measured vs simulated TTFT p50/p95/p99 and
  TPOT p50 (the simulator's inter-token latency is the per-request mean, i.e. TPOT).

    python bench/simulate_fidelity_gpu.py measure --model /tmp/l8b --out-dir OUT --kv-cache-bytes 48000000000
    .venv/bin/python bench/simulate_fidelity_gpu.py compare OUT --profile llama3-8b-h100
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
from simulate_calibrate import serve_options, start_engine

from shoal.autoscale.baselines import FixedForPeak
from shoal.gateway.routing import make_policy
from shoal.loadgen.arrivals import arrival_gaps
from shoal.local import shoal_command
from shoal.simulate.profile import EngineProfile, load_profile
from shoal.simulate.simulator import SimConfig, simulate
from shoal.simulate.trace import Trace, make_trace


def measure(args: argparse.Namespace) -> None:
    """One engine, then one bench run per rate against it (the first run also warms every batch shape up)."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    options = serve_options(args.device, args.kv_cache_bytes)
    log = args.out_dir / "serve.log"
    server = start_engine(args.model, args.max_num_seqs, args.max_num_batched_tokens, options, log)
    try:
        server.wait_ready(timeout=900)
        for i, rate in enumerate([args.rates[-1], *args.rates]):
            out = args.out_dir / ("warm.json" if i == 0 else f"rate-{rate:g}.json")
            subprocess.run(
                [
                    *shoal_command("bench", "serve"),
                    *("--url", server.url, "--model", args.model, "--dataset", "random"),
                    *("--num-requests", str(round(rate * args.seconds)), "--request-rate", str(rate)),
                    *("--input-len", str(args.input_len), "--output-len", str(args.output_len)),
                    *("--seed", str(1000 + i), "--no-progress", "--json", str(out)),
                ],
                check=False,
                stdout=subprocess.DEVNULL,
            )
            summary = json.loads(out.read_text())["summary"]
            print(f"{out.name}: {summary['failed']} failed {summary['errors']}; TTFT {summary['ttft']}", flush=True)
    finally:
        server.stop()


def run_trace(record: dict) -> Trace:
    """The trace the load generator sent: its seeded arrivals, the engine's prompt token counts, exact outputs."""
    config, results = record["config"], record["results"]
    gaps = arrival_gaps(len(results), float(config["request_rate"]), config["burstiness"], config["seed"])
    if not all(r["success"] for r in results):
        raise SystemExit(f"a run with failed requests cannot be replayed: {sum(not r['success'] for r in results)}")
    prompt = [r["prompt_tokens"] for r in results]
    output = [r["output_tokens"] for r in results]
    return make_trace(f"rate-{config['request_rate']}", np.cumsum(gaps), prompt, output)


def simulated(trace: Trace, profile: EngineProfile) -> tuple[np.ndarray, np.ndarray]:
    """TTFT and TPOT of every request, one replica of ``profile`` serving the trace."""
    run = simulate(trace, profile, FixedForPeak(1), make_policy("round-robin"), SimConfig(initial_replicas=1))
    decoded = run.output_tokens > 1
    tpot = (run.finish - run.first_token)[decoded] / (run.output_tokens[decoded] - 1)
    return run.first_token - run.arrival, tpot


def compare(args: argparse.Namespace) -> None:
    profile = load_profile(args.profile)
    print(f"profile {profile.name}; seconds, measured / simulated")
    print(f"{'rate':>6} {'n':>5} {'TTFT p50':>15} {'TTFT p95':>15} {'TTFT p99':>15} {'TPOT p50':>15}")
    for path in sorted(args.run_dir.glob("rate-*.json"), key=lambda p: float(p.stem.removeprefix("rate-"))):
        record = json.loads(path.read_text())
        trace = run_trace(record)
        ttft_sim, tpot_sim = simulated(trace, profile)
        ttft = np.array([r["ttft"] for r in record["results"]])
        tpot = np.array([(r["e2e"] - r["ttft"]) / (r["output_tokens"] - 1) for r in record["results"]])
        cells = [
            f"{np.percentile(m, q):.3f} / {np.percentile(s, q):.3f}"
            for m, s, q in ((ttft, ttft_sim, 50), (ttft, ttft_sim, 95), (ttft, ttft_sim, 99), (tpot, tpot_sim, 50))
        ]
        rate = float(record["config"]["request_rate"])
        print(f"{rate:>6g} {len(ttft):>5} " + " ".join(f"{c:>15}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    run = steps.add_parser("measure", help="one engine under Poisson load at each rate (on the GPU machine)")
    run.add_argument("--model", required=True)
    run.add_argument("--out-dir", type=Path, required=True)
    run.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    run.add_argument("--rates", type=float, nargs="+", default=[5.0, 15.0, 25.0], help="requests per second")
    run.add_argument("--seconds", type=float, default=30.0, help="arrivals per run span about this long")
    run.add_argument("--input-len", type=int, default=1000)
    run.add_argument("--output-len", type=int, default=128)
    run.add_argument("--max-num-seqs", type=int, default=256)
    run.add_argument("--max-num-batched-tokens", type=int, default=8192)
    run.add_argument("--kv-cache-bytes", type=int, default=None)
    check = steps.add_parser("compare", help="replay the runs in the simulator, side by side")
    check.add_argument("run_dir", type=Path)
    check.add_argument("--profile", default="llama3-8b-h100")
    args = parser.parse_args()
    if args.step == "measure":
        measure(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
