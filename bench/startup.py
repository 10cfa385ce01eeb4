"""A new replica's start-up by phase: a SmolLM2 ``shoal up`` fleet (in this process) scaled 1 -> 2 under a light
load, from the scale decision to the first token the new engine served.

Each run starts a fresh fleet of one engine, waits until it serves, starts a light load (``--clients`` streaming
clients through the gateway, round-robin, short answers, a pause between requests), then raises the count to 2
as the autoscaler does and times the new engine. The same probes serve both modes, so they compare: the fleet's
own moments (decision, spawn, listing in the backends file), the engine process's age (``/proc``), its log's
``start-up took`` and ``model loaded`` lines (loading, profiling, warming; ready), and its ``generation_tokens``
counter (the first token it served), polled every ``POLL_S``. Where the engine publishes its own phases
(``shoal_engine_startup_seconds``) they split the rest into imports, planning and the untimed steps.

``--standby`` adds a third mode: the same fleet with ``autoscaling.standby: 1`` (mode Recommend, so only the
bench moves the count), where the scale-up promotes the pool's ready engine: ``promote`` (decision to listed),
then ``routed`` (listed to its first served token).

``--weights-cache cold,warm,off`` (default ``warm``) sets what the new engine finds in its converted-weights
cache (``--weights-cache-dir``): the first engine always writes one in the run's directory; ``warm`` gives the new
engine that one (a second engine on a node), ``cold`` an empty one (it converts and writes), ``off`` none (it
converts, as before the cache). Each mode is a row; the engine's ``weights:`` line is printed with each run.

``--before TREE`` runs the engines and the gateway from another checkout (e.g. ``git archive BASE | tar -x -C
TREE``) and turns this fleet's own cuts off (spawn on the decision's tick, readiness polled every 0.2 s), runs
alternating with the current code, so both are measured on the same machine at the same time. Medians over
``--runs``. Usage:
    .venv/bin/python bench/startup.py [--runs 3] [--weights-cache cold,warm,off] [--before TREE] [--standby]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from chat_load import ChatLoad  # bench/chat_load.py, beside this script

import shoal.local.up as up_module
from shoal.engine.server.startup_metrics import process_age
from shoal.local import free_port, metric
from shoal.local.fleet import EngineReplica
from shoal.local.manifest import load_manifest
from shoal.local.signals import autoscaling
from shoal.local.startup import parse_engine_startup
from shoal.local.up import TICK_S, Up, UpOptions

MODEL = "smollm2"
POLL_S = 0.05
PHASES = ("promote", "spawn", "imports", "planning", "loading", "profiling", "warming", "other", "listed", "routed")
TOOK = re.compile(r"start-up took [\d.]+ s: (.*)")
LOADED = re.compile(r"^(\S+ \S+) INFO \S+ \[-\] model loaded", re.M)
WEIGHTS = re.compile(r"^\s*weights: (.*)$", re.M)
CACHE_FLAG = "--weights-cache-dir"
CACHE_MODES = ("cold", "warm", "off")


def _manifest(directory: Path, standby: bool) -> Path:
    autoscaling = {"enabled": True, "mode": "Recommend", "standby": 1} if standby else {"enabled": False}
    document = {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "startup-bench"},
        "spec": {
            "model": {"source": "smollm2-135m", "servedName": MODEL},
            "engine": {"maxModelLen": 512, "maxNumSeqs": 4, "startupSeconds": 300},
            "replicas": {"min": 1, "max": 2, "count": 1},
            "autoscaling": autoscaling,
            "gateway": {"routingPolicy": "round-robin"},
        },
    }
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _logged_ready(log: str) -> float | None:
    """When the engine logged ``model loaded`` (right after ``/ready`` turned 200), to the millisecond: the same
    moment in every version, unlike a poll that shares this process's event loop with the fleet."""
    found = LOADED.search(log)
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if found else None


def _logged_phases(log: str) -> dict[str, float]:
    """``loading 3.10 s, profiling 0.00 s, warming 1.20 s`` from the engine's ``start-up took`` line."""
    found = TOOK.search(log)
    if found is None:
        return {}
    return {name: float(s) for name, s in re.findall(r"(\w+) ([\d.]+) s", found.group(1))}


async def _watch(replica: EngineReplica, decided: float, listed_of: Any, timeout: float) -> dict[str, float]:
    """Polls the new engine until it has served a token; its phases in seconds."""
    ready = first = start = None
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while first is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{replica.name} did not serve within {timeout} s")
            url = replica.url
            if start is None and replica.process is not None:
                start = time.time() - process_age(replica.process.process.pid)
            if url is not None and ready is None:
                try:
                    if (await client.get(url + "/ready", timeout=1)).status_code == 200:
                        ready = time.time()
                except httpx.HTTPError:
                    pass
            if ready is not None and url is not None:
                tokens = await asyncio.to_thread(metric, url, "shoal_engine_generation_tokens_total")
                if tokens > 0:
                    first = time.time()
            await asyncio.sleep(POLL_S)
    assert replica.process is not None and start is not None and ready is not None
    listed = listed_of()
    log = replica.process.log(200_000)
    ready = _logged_ready(log) or ready
    logged = _logged_phases(log)
    published = parse_engine_startup(httpx.get(f"{replica.url}/metrics").text).phases
    phases = {"spawn": max(start - decided, 0.0)}  # /proc counts 10 ms ticks
    split = {p: published[p] for p in ("imports", "planning") if p in published}
    engine = {**split, **{p: logged.get(p, 0.0) for p in ("loading", "profiling", "warming")}}
    phases |= engine
    phases["other"] = ready - start - sum(engine.values())  # untimed steps (and, before, imports and planning)
    phases["listed"] = max(listed - ready, 0.0)
    phases["routed"] = first - max(listed, ready)
    return phases


async def _first_token(url: str, timeout: float) -> float:
    """When the engine at ``url`` was first seen to have served a token."""
    deadline = time.monotonic() + timeout
    while await asyncio.to_thread(metric, url, "shoal_engine_generation_tokens_total") == 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not serve within {timeout} s")
        await asyncio.sleep(POLL_S)
    return time.time()


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without any ``flag VALUE`` pair."""
    drop = {i for i, arg in enumerate(argv) if arg == flag} | {i + 1 for i, arg in enumerate(argv) if arg == flag}
    return [arg for i, arg in enumerate(argv) if i not in drop]


async def _one_run(work: Path, clients: int, baseline: bool, standby: bool, cache: str) -> dict[str, float]:
    local = load_manifest(_manifest(work, standby))
    _, source = autoscaling(local.spec)
    up = Up(local, UpOptions(port=free_port(), tui=False, log_dir=work), None, source, lambda line: None)
    argv = [*_without(up.fleet.launch.argv, CACHE_FLAG), "--log-level", "info"]  # its "start-up took" line
    if not baseline:  # the first engine writes the run's own cache (the baseline has no such flag)
        argv += [CACHE_FLAG, str(work / "converted-weights")]
    up.fleet.launch = replace(up.fleet.launch, argv=argv)
    load = ChatLoad(up.url, MODEL, clients, max_tokens=8, prompt="Hi", pause_s=0.5)
    running = asyncio.create_task(up.run(None))
    try:
        while len(up.fleet.ready_backends()) < 1 or (standby and up.fleet.pool()[0].phase != "standby"):
            if running.done():
                raise RuntimeError(f"shoal up stopped: {up.failed}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        load.start()
        await asyncio.sleep(2.0)
        if cache != "warm" and not baseline:  # the last flag given wins
            given = str(work / "empty-cache") if cache == "cold" else ""
            up.fleet.launch = replace(up.fleet.launch, argv=[*argv, CACHE_FLAG, given])
        decided = time.time()
        up.fleet.scale_to(2, decided)
        if not baseline:
            up.fleet.apply(decided)  # what shoal up does on a decision now; before, the next tick started it
        while len(up.fleet.active()) < 2:
            await asyncio.sleep(POLL_S)
        new = next(r for r in up.fleet.active() if r.startup is not None and r.startup.decided == decided)
        listed_at: dict[str, float] = {}

        async def follow_listing() -> None:
            while new.url is None or new.url not in up.backends.read_text():
                await asyncio.sleep(POLL_S)
            listed_at["t"] = time.time()

        follower = asyncio.create_task(follow_listing())
        if standby:
            first = await _first_token(new.url or "", timeout=600)
            await follower
            phases = {"promote": listed_at["t"] - decided, "routed": first - listed_at["t"]}
        else:
            phases = await _watch(new, decided, lambda: listed_at.get("t", time.time()), timeout=600)
        follower.cancel()
        if not baseline and new.startup is not None:
            print(f"  shoal up's record: {new.name} {new.startup.summary()}", flush=True)
        weights = WEIGHTS.search(new.process.log(200_000)) if new.process is not None else None
        print(f"  {new.name} weights: {weights.group(1) if weights else '-'}", flush=True)
        return phases
    finally:
        await asyncio.to_thread(load.stop)
        up.stopping.set()
        await running


def _run(work: Path, clients: int, before: Path | None, standby: bool, cache: str) -> dict[str, float]:
    """One run; ``before``: the engines and gateway from that tree, this fleet's cuts off."""
    saved_path, saved_poll, saved_cwd = os.environ.get("PYTHONPATH"), up_module.STARTING_POLL_S, os.getcwd()
    if before is not None:  # the children run ``python -m shoal.cli``: the tree in their cwd and PYTHONPATH
        os.environ["PYTHONPATH"] = str(before)
        os.chdir(before)
        up_module.STARTING_POLL_S = TICK_S
    try:
        return asyncio.run(_one_run(work, clients, before is not None, standby, cache))
    finally:
        os.chdir(saved_cwd)
        up_module.STARTING_POLL_S = saved_poll
        if saved_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_path


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {p: statistics.median(r.get(p, 0.0) for r in runs) for p in PHASES if any(p in r for r in runs)}


def _row(label: str, phases: dict[str, float]) -> str:
    cells = " ".join(f"{phases[p]:>8.2f}" if p in phases else f"{'-':>8}" for p in PHASES)
    return f"{label:<8} {cells} {sum(phases.values()):>8.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--before", type=Path, help="a checkout whose engines and gateway are the baseline")
    parser.add_argument("--standby", action="store_true", help="also time a promotion from a standby pool of 1")
    parser.add_argument(
        "--weights-cache",
        default="warm",
        help=f"what the new engine finds in its converted-weights cache, one row each: {', '.join(CACHE_MODES)}",
    )
    parser.add_argument("--json", type=Path, help="write every run's phases here")
    args = parser.parse_args()
    caches = args.weights_cache.split(",")
    if not caches or any(c not in CACHE_MODES for c in caches):
        parser.error(f"--weights-cache takes a comma-separated list of {', '.join(CACHE_MODES)}")
    modes: list[tuple[str, Path | None]] = [(cache, None) for cache in caches]
    modes += [("before", args.before)] if args.before else []
    modes += [("standby", None)] if args.standby else []
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in modes}
    for index in range(args.runs):
        for label, tree in modes if index % 2 else reversed(modes):
            with tempfile.TemporaryDirectory(prefix="shoal-startup-") as work:
                cache = label if label in CACHE_MODES else "warm"
                phases = _run(Path(work), args.clients, tree, label == "standby", cache)
            results[label].append(phases)
            print(f"run {index + 1} {label}: " + ", ".join(f"{p} {s:.2f}" for p, s in phases.items()), flush=True)
    print(f"\nmedian of {args.runs} runs, seconds, {datetime.now():%Y-%m-%d %H:%M}, load {os.getloadavg()[0]:.1f}")
    print(f"{'':<8} " + " ".join(f"{p:>8}" for p in PHASES) + f" {'total':>8}")
    for label, runs in results.items():
        print(_row(label, _median(runs)))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
