"""The loader alone, SmolLM2 as an engine on this CPU loads it, with the converted-weights cache off, missing
(an empty directory: convert, then write the entry) and hit (the entry there): seconds per ``load_model``, each
in a fresh process (so no heap or oneDNN state carries over; the entry's file is in the page cache, as on a
node where another engine just wrote it), the three modes alternating, medians over ``--runs``.

Usage: .venv/bin/python bench/converted_weights.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

MODES = ("off", "miss", "hit")
EXPECTED = {"off": "converted cache off", "miss": "converted cache miss, written", "hit": "converted cache hit"}


def _one(cache: str) -> None:
    """Loads once in this process and prints the seconds and what the cache did."""
    from shoal.engine.core.engine_config import EngineConfig
    from shoal.engine.core.startup_plan import plan_hardware
    from shoal.engine.loader import WeightsCache, load_model
    from shoal.kernels import get_ops
    from shoal.model_registry import resolve_model

    source = resolve_model("smollm2-135m")
    plan = plan_hardware(EngineConfig(model="smollm2-135m"), source)
    weights = WeightsCache(Path(cache)) if cache else None
    start = time.perf_counter()
    load_model(source, plan.dtype, get_ops(None, plan.device), plan.device, plan.quantization, weights)
    outcome = weights.outcome if weights else "converted cache off"
    print(f"{time.perf_counter() - start:.3f} {outcome}")


def _timed(cache: str) -> tuple[float, str]:
    done = subprocess.run(
        [sys.executable, __file__, "--one", cache], capture_output=True, text=True, check=True, env=os.environ
    )
    seconds, outcome = done.stdout.strip().splitlines()[-1].split(" ", 1)
    return float(seconds), outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        _one(args.one)
        return 0
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="shoal-converted-") as work:
        warm = Path(work) / "warm"
        _timed(str(warm))  # the entry the hits read
        for run in range(args.runs):
            for mode in MODES if run % 2 else reversed(MODES):
                cache = {"off": "", "miss": str(Path(work) / f"empty-{run}"), "hit": str(warm)}[mode]
                seconds, outcome = _timed(cache)
                assert outcome.startswith(EXPECTED[mode]), outcome
                results[mode].append(seconds)
                print(f"run {run + 1} {mode}: {seconds:.2f} s ({outcome})", flush=True)
    print(f"\nload_model, median of {args.runs}, {datetime.now():%Y-%m-%d %H:%M}, load {os.getloadavg()[0]:.1f}")
    for mode, seconds in results.items():
        print(f"{mode:<5} {statistics.median(seconds):6.2f} s  (runs: {', '.join(f'{s:.2f}' for s in seconds)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
