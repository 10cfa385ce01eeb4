"""Fidelity check of the fleet simulator (issue 12): one short burst trace replayed against a real local fleet
and in the simulator, simulated vs measured TTFT and replica counts side by side.

Everything happens in one run, because this machine is shared and its speed changes by the hour:

1. **Calibrate**: ``bench/simulate_calibrate.py``'s runs against one ``shoal serve`` configured as the fleet's
   engines give a profile in engine CPU seconds (an engine with a core to itself), and the share of a core the
   engine got during those runs (CPU seconds over wall seconds): the machine's slowdown now.
2. **Trace**: base load, a ``--step``-times step, base again, Poisson arrivals at rates set from one engine's
   capacity as calibrated now; random-word prompts whose token counts come from the model's own tokenizer;
   written as a simulator CSV trace, which step 4 reads back.
3. **Replay** against ``shoal up`` (gateway, SmolLM2 engines, Shoal's autoscaler on the direct-scrape source;
   replicas min 1, max 3): every request streamed at its timestamp, TTFT timed by the client; every second the
   fleet's desired / ready / starting / draining count, its scaling decisions, which engines have work and
   each engine's CPU time, read from the dashboard file ``shoal up`` writes and ``/proc``.
4. **Simulate** the trace file with the same manifest's ShoalPolicy asked at ``shoal up``'s interval, the same
   routing policy, engine batch and hold queue, one replica to start with, and start-up drawn from the range
   measured on the real engines in step 3; with the calibrated engine (a core each), with it slowed by the
   share measured in step 1, and, after the fact, slowed by the share of a core a busy engine got during the
   replay (CPU seconds of serving engines per second an engine had work): what is left between that run and
   the measured one is not the engines' speed.
5. **Report**: overall and per-minute TTFT P50 / P95, ready replicas, scale events, side by side; ``--json``;
   the simulator's own timeline and CDF plots with the measured fleet as one more run.

    .venv/bin/python bench/simulate_fidelity.py --out-dir /tmp/shoal-fidelity --base-load 0.25 --plots docs/simulator
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import httpx
import numpy as np
import yaml

from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.shoal_policy import ShoalPolicy
from shoal.cpu_features import cpu_info
from shoal.gateway.routing import make_policy
from shoal.loadgen.client import RequestResult, send_request
from shoal.loadgen.datasets import BenchRequest, random_dataset
from shoal.local import LocalProcess, shoal_command
from shoal.local.autoscaler import LocalAutoscaler
from shoal.local.drain import drain_grace
from shoal.local.manifest import LocalManifest, load_manifest
from shoal.operator.autoscaler import autoscaling_config
from shoal.simulate.compare import Comparison, format_table
from shoal.simulate.policies import Sizing
from shoal.simulate.profile import EngineProfile, StepCost
from shoal.simulate.results import WINDOW_S, summarize_run
from shoal.simulate.simulator import SimConfig, SimRun, simulate
from shoal.simulate.sizing import peak_rate, replica_capacity, replicas_for
from shoal.simulate.trace import Trace, load_trace, make_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simulate_calibrate import measure

MEASURED = "measured"
SIM_CALIBRATED = "sim-calibrated"
SIM_LOADED = "sim-loaded"
SIM_REPLAY_SHARE = "sim-replay-share"  # after the fact: the engine slowed by the share it got during the replay
CALIBRATION_MAX_SEQS = 16  # the calibration's largest batch: the profile then covers the fleet's smaller one
SAMPLE_S = 1.0


# -- the trace ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    seconds: float
    rate: float


def burst_phases(base_rate: float, step: float, base_s: float, step_s: float, after_s: float) -> list[Phase]:
    return [Phase(base_s, base_rate), Phase(step_s, base_rate * step), Phase(after_s, base_rate)]


def poisson_arrivals(phases: Sequence[Phase], rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process whose rate is constant within each phase."""
    times: list[float] = []
    start = 0.0
    for phase in phases:
        t = start
        while True:
            t += float(rng.exponential(1.0 / phase.rate))
            if t >= start + phase.seconds:
                break
            times.append(t)
        start += phase.seconds
    return np.asarray(times)


def burst_trace(
    phases: Sequence[Phase], requests: Sequence[BenchRequest], count_tokens: Callable[[str], int], seed: int
) -> tuple[Trace, list[BenchRequest]]:
    """The trace (prompt tokens as the tokenizer counts them) and the request sent at each of its arrivals."""
    arrival = poisson_arrivals(phases, np.random.default_rng(seed))
    if len(arrival) > len(requests):
        raise ValueError(f"{len(arrival)} arrivals but only {len(requests)} requests to send")
    chosen = list(requests[: len(arrival)])
    bursts = (phases[0].seconds,) if len(phases) > 1 else ()
    trace = make_trace(
        "fidelity-burst",
        arrival,
        [count_tokens(r.prompt) for r in chosen],
        [r.max_tokens for r in chosen],
        bursts=bursts,
    )
    return trace, chosen


def write_trace(trace: Trace, path: Path) -> None:
    """The simulator's CSV trace format (``shoal simulate --trace PATH`` reads it)."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["timestamp", "prompt_tokens", "output_tokens"])
        for at, prompt, output in zip(trace.arrival, trace.prompt_tokens, trace.output_tokens, strict=True):
            writer.writerow([f"{at:.6f}", int(prompt), int(output)])


# -- the real fleet ----------------------------------------------------------------------------------------------
def manifest_text(
    name: str,
    model: str,
    max_num_seqs: int,
    replicas_max: int,
    slo_ttft_p95_s: float,
    queue_per_replica: int,
    scale_down_s: int,
    first_token_timeout_s: float,
) -> str:
    """An InferenceDeployment whose engines run as the calibrated one does (default dtype and budget)."""
    return yaml.safe_dump(
        {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "InferenceDeployment",
            "metadata": {"name": name},
            "spec": {
                "model": {"source": model},
                "engine": {"maxNumSeqs": max_num_seqs, "startupSeconds": 600},
                "replicas": {"min": 1, "max": replicas_max},
                "autoscaling": {
                    "enabled": True,
                    "queueDepthPerReplica": queue_per_replica,
                    "ttftP95Seconds": slo_ttft_p95_s,
                    "scaleDownStabilizationSeconds": scale_down_s,
                },
                "gateway": {"routingPolicy": "prefix-aware", "timeouts": {"firstTokenSeconds": first_token_timeout_s}},
            },
        },
        sort_keys=False,
    )


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class FleetWatch:
    """What ``shoal up``'s dashboard file said, sampled every second, in the fleet's own clock (``time.time``)."""

    dashboard: Path
    rows: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    decisions: dict[tuple[float, int], dict[str, object]] = field(default_factory=dict)
    engine_cpu: dict[int, float] = field(default_factory=dict)  # last CPU seconds read, per engine process
    serving_cpu: float = 0.0  # CPU seconds engines used while ready or draining (loading a model is not serving)
    usage: list[tuple[float, float, int]] = field(default_factory=list)  # (time, serving_cpu, engines with work)
    load: list[tuple[float, float]] = field(default_factory=list)
    engine_ttft_p95: list[tuple[float, float | None]] = field(default_factory=list)  # what the autoscaler saw

    def sample(self, now: float) -> None:
        try:
            snapshot = json.loads(self.dashboard.read_text())["snapshot"]
        except (OSError, ValueError, KeyError):
            return
        phases = [r["phase"] for r in snapshot["replicas"]]
        self.rows.append(
            (
                now,
                int(snapshot["desired"]),
                phases.count("ready"),
                phases.count("starting") + phases.count("backoff"),
                phases.count("draining"),
            )
        )
        names, busy = set(), 0
        for replica in snapshot["replicas"]:
            name = replica["name"]
            names.add(name)
            if replica["phase"] == "starting":
                self.started.setdefault(name, float(replica["since"]))
            elif replica["phase"] == "ready":
                self.ready.setdefault(name, float(replica["since"]))
            serving = replica["phase"] in ("ready", "draining")
            busy += serving and bool(replica["waiting"] or replica["running"])
            if replica["pid"] is not None and (cpu := process_cpu_seconds(int(replica["pid"]))) is not None:
                pid = int(replica["pid"])
                if serving:
                    self.serving_cpu += cpu - self.engine_cpu.get(pid, cpu)
                self.engine_cpu[pid] = cpu
        for name in set(self.started) | set(self.ready):
            if name not in names:
                self.gone.setdefault(name, now)
        for row in snapshot["decisions"]:
            self.decisions.setdefault((float(row["time"]), int(row["to_replicas"])), row)
        self.usage.append((now, self.serving_cpu, busy))
        self.load.append((now, os.getloadavg()[0]))
        self.engine_ttft_p95.append((now, snapshot["ttft_p95_seconds"]))

    async def follow(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample(time.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_S)

    def busy_core_share(self, since: float) -> float | None:
        """CPU seconds the serving engines used per second that an engine had work, after ``since``: the share
        of a core a busy engine really got (None without busy samples)."""
        usage = [row for row in self.usage if row[0] >= since]
        engine_s = sum(busy * (t2 - t1) for (t1, _, busy), (t2, _, _) in itertools.pairwise(usage))
        return (usage[-1][1] - usage[0][1]) / engine_s if engine_s > 0 else None

    def cores_per_window(self, since: float, window_s: float = WINDOW_S) -> list[float]:
        """Cores the serving engines used in each window after ``since``."""
        usage = [row for row in self.usage if row[0] >= since]
        if len(usage) < 2:
            return []
        times = np.asarray([t for t, _, _ in usage]) - since
        cpu = np.asarray([c for _, c, _ in usage])
        edges = np.arange(0.0, times[-1] + window_s, window_s)
        at_edges = np.interp(np.minimum(edges, times[-1]), times, cpu)
        spans = np.diff(np.minimum(edges, times[-1]))
        return [float(c / s) for c, s in zip(np.diff(at_edges), spans, strict=True) if s > 0]

    def engine_ttft_per_window(self, since: float, window_s: float = WINDOW_S) -> list[float | None]:
        """The highest engine-side TTFT P95 (the scrape source's 30 s window) sampled in each window after
        ``since``: the engines' own view, without the gateway, the client and the hops between them."""
        highest: dict[int, float | None] = {}
        for t, value in self.engine_ttft_p95:
            if t >= since:
                w = int((t - since) // window_s)
                best = highest.get(w)
                highest[w] = value if best is None or (value is not None and value > best) else best
        return [highest.get(w) for w in range(max(highest) + 1)] if highest else []

    def startups(self, after: float = -math.inf) -> dict[str, float]:
        """Seconds from start to ready of each engine started at or after ``after``."""
        return {n: self.ready[n] - t for n, t in self.started.items() if n in self.ready and t >= after}


@dataclass
class Replay:
    t0: float  # the fleet clock when the trace's time 0 was sent
    sent: list[float]  # seconds after t0 each request actually left
    results: list[RequestResult]
    watch: FleetWatch


async def send_trace(
    url: str,
    model: str,
    trace: Trace,
    requests: Sequence[BenchRequest],
    watch: FleetWatch,
    timeout_s: float,
    warmup: Sequence[BenchRequest] = (),
) -> Replay:
    """Streams each request at its trace time (never waiting for earlier ones) while the watch samples; the
    ``warmup`` requests go first, one at a time, unmeasured (a fresh engine's first request pays for lazy set-up)."""
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=1024)
    stop = asyncio.Event()
    follower = asyncio.create_task(watch.follow(stop))
    sent = [math.nan] * len(requests)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits, trust_env=False) as client:
        for request in warmup:
            await send_request(client, url, model, request)
        t0, start = time.time(), time.perf_counter()

        async def one(i: int) -> RequestResult:
            sent[i] = time.perf_counter() - start
            return await send_request(client, url, model, requests[i])

        tasks = []
        for i, at in enumerate(trace.arrival.tolist()):
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        results = await asyncio.gather(*tasks)
    stop.set()
    await follower
    return Replay(t0, sent, list(results), watch)


def wait_for_fleet(up: LocalProcess, watch: FleetWatch, timeout_s: float) -> None:
    """Until the gateway answers ``/ready`` and the fleet shows a ready engine (sampling meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if up.process.poll() is not None:
            raise RuntimeError(f"shoal up exited with {up.process.returncode}:\n{up.log()}")
        watch.sample(time.time())
        try:
            ready = httpx.get(up.url + "/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            ready = False
        if ready and watch.rows and watch.rows[-1][2] >= 1:
            return
        time.sleep(SAMPLE_S)
    raise TimeoutError(f"no ready engine behind {up.url} after {timeout_s:.0f} s:\n{up.log()}")


def measured_run(trace: Trace, replay: Replay, routing: str) -> SimRun:
    """The real fleet's record in the simulator's own shape, so one report and one plot serve both.

    Times are seconds after the trace's start; a request's arrival is its trace time and its first token that
    plus the TTFT its client measured (so the TTFT is the user's). A failed request counts as dropped.
    """
    watch, t0 = replay.watch, replay.t0
    first = np.full(len(trace), math.nan)
    finish = np.full(len(trace), math.nan)
    dropped: dict[int, str] = {}
    for i, result in enumerate(replay.results):
        if result.success:
            first[i] = trace.arrival[i] + result.ttft
            finish[i] = trace.arrival[i] + result.e2e
        else:
            dropped[i] = "failed: " + result.error[:80]
    end = max(watch.rows[-1][0] - t0 if watch.rows else 0.0, float(np.nanmax(finish)) if len(finish) else 0.0)
    rows = [
        (t - t0, desired, ready, starting, draining) for t, desired, ready, starting, draining in watch.rows if t >= t0
    ]
    first_desired = rows[0][1] if rows else 1
    decisions = [ScalingDecision(0.0, first_desired, "Initial", "the count when the trace started")]
    for (at, to), row in sorted(watch.decisions.items()):
        if at >= t0:
            decisions.append(ScalingDecision(at - t0, to, str(row["rule"]), str(row["message"])))
    created = {name: watch.started.get(name, watch.ready.get(name, t0)) for name in {*watch.started, *watch.ready}}
    spans = [
        (max(start, t0) - t0, min(watch.gone.get(name, t0 + end), t0 + end) - t0)
        for name, start in created.items()
        if watch.gone.get(name, math.inf) > t0
    ]
    return SimRun(
        policy="shoal",
        routing=routing,
        arrival=trace.arrival,
        first_token=first,
        finish=finish,
        output_tokens=trace.output_tokens,
        dropped=dropped,
        decisions=decisions,
        replica_spans=spans,
        timeline=np.asarray(rows, dtype=np.float64).reshape(-1, 5),
        route_reasons=Counter(),
        prompt_tokens_total=int(trace.prompt_tokens.sum()),
        prefill_tokens_saved=0,
        end_time=end,
    )


# -- the simulated fleet -----------------------------------------------------------------------------------------
class LocalShoalPolicy(ShoalPolicy):
    """ShoalPolicy asked at ``shoal up``'s interval (the simulator's default is the operator's 10 s)."""

    period_seconds = LocalAutoscaler.interval_s


def slowed(profile: EngineProfile, factor: float) -> EngineProfile:
    """The same engine with every step ``factor`` times longer (a core shared with the machine's other work)."""
    step = StepCost(*(value * factor for value in asdict(profile.step).values()))
    return replace(profile, name=f"{profile.name} x{factor:.2f}", step=step)


def simulate_fleet(
    trace: Trace, profile: EngineProfile, manifest: LocalManifest, startup_s: tuple[float, float], seed: int
) -> SimRun:
    """The trace through the simulator with the local fleet's policy, routing, batch, hold queue and drain."""
    spec = manifest.spec
    engine = replace(profile.with_engine(max_num_seqs=spec.engine.max_num_seqs), startup_s=startup_s)
    gateway = spec.gateway
    config = SimConfig(
        seed=seed,
        initial_replicas=spec.replicas.min,
        hold_limit=gateway.hold_queue.size,
        hold_timeout_s=gateway.hold_queue.wait_seconds,
        drain_grace_s=drain_grace(spec, None).seconds,  # shoal up's before it has observed a pace (then longer)
        sample_s=SAMPLE_S,
    )
    policy = LocalShoalPolicy(autoscaling_config(spec))
    return simulate(trace, engine, policy, make_policy(gateway.routing_policy, gateway.bound_factor), config)


# -- the report --------------------------------------------------------------------------------------------------
def scale_events(run: SimRun) -> list[tuple[float, int, int, str]]:
    """(time, from, to, rule) of every decision that changed the count."""
    events = []
    for before, after in itertools.pairwise(run.decisions):
        if after.replicas != before.replicas:
            events.append((round(after.time, 1), before.replicas, after.replicas, after.rule))
    return events


def per_minute(run: SimRun, window_s: float = WINDOW_S) -> list[dict[str, float | int | None]]:
    """Per window of arrivals: requests, TTFT P50 / P95 (inf for a request never served), mean ready replicas."""
    ttft = np.where(np.isnan(run.first_token), np.inf, run.first_token - run.arrival)
    windows = (run.arrival // window_s).astype(np.int64)
    timeline = run.timeline
    rows: list[dict[str, float | int | None]] = []
    for w in range(int(windows.max()) + 1 if len(windows) else 0):
        inside = ttft[windows == w]
        during = timeline[(timeline[:, 0] >= w * window_s) & (timeline[:, 0] < (w + 1) * window_s)]
        p50, p95 = np.percentile(inside, [50, 95], method="higher") if len(inside) else (None, None)
        rows.append(
            {
                "minute": w,
                "requests": len(inside),
                "ttft_p50_s": None if p50 is None else float(p50),
                "ttft_p95_s": None if p95 is None else float(p95),
                "ready_mean": float(during[:, 2].mean()) if len(during) else None,
            }
        )
    return rows


def side_by_side(runs: dict[str, SimRun], trace: Trace, slo_ttft_p95_s: float) -> dict[str, object]:
    """Each run's overall figures, scale events, per-minute rows and timeline, keyed by run."""
    return {
        name: {
            "summary": summarize_run(run, slo_ttft_p95_s, trace.bursts),
            "scale_events": scale_events(run),
            "per_minute": per_minute(run),
            "timeline": run.timeline.round(2).tolist(),
        }
        for name, run in runs.items()
    }


def _cell(value: object, fmt: str = "{:.2f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return fmt.format(value)


def format_side_by_side(report: dict[str, object]) -> str:
    """Per-minute TTFT P50 / P95 and mean ready replicas, one column group per run, then scale events."""
    names = list(report)
    minutes = report[names[0]]["per_minute"]  # type: ignore[index]
    header = f"{'min':>4}{'reqs':>6}" + "".join(f"{name + ' p50/p95/ready':>34}" for name in names)
    lines = [header]
    for i, row in enumerate(minutes):
        cells = []
        for name in names:
            r = report[name]["per_minute"][i]  # type: ignore[index]
            cells.append(f"{_cell(r['ttft_p50_s'])} / {_cell(r['ttft_p95_s'])} / {_cell(r['ready_mean'], '{:.1f}')}")
        lines.append(f"{row['minute']:>4}{row['requests']:>6}" + "".join(f"{c:>34}" for c in cells))
    for name in names:
        rows = report[name]["scale_events"]  # type: ignore[index]
        events = ", ".join(f"{t:.0f}s {a}->{b} {rule}" for t, a, b, rule in rows)
        lines.append(f"scale events {name}: {events or 'none'}")
    return "\n".join(lines)


# -- the run -----------------------------------------------------------------------------------------------------
def calibrate(model: str, out_dir: Path) -> tuple[EngineProfile, float, dict[str, float]]:
    """The CPU-seconds profile and the slowdown (wall over CPU seconds of the same runs, at least 1)."""
    from shoal.simulate.calibrate import profile_from_bench

    budget = 2048
    out_dir.mkdir(parents=True, exist_ok=True)
    records, kv_tokens, startup_cpu = measure(model, CALIBRATION_MAX_SEQS, budget, out_dir)
    cpu = sum(float(r["engine_s"]) for r in records)
    wall = sum(float(r["summary"]["duration_s"]) for r in records)
    source = (
        f"bench/simulate_fidelity.py calibration on {time.strftime('%Y-%m-%d %H:%M')} UTC, "
        f"{cpu_info().summary()}, load average {os.getloadavg()[0]:.1f}"
    )
    profile = profile_from_bench(
        records, f"{model}-now", source, budget, CALIBRATION_MAX_SEQS, kv_tokens, (startup_cpu, startup_cpu)
    )
    return profile, max(1.0, wall / cpu), {"engine_cpu_s": cpu, "wall_s": wall, "startup_cpu_s": startup_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/shoal-fidelity"))
    parser.add_argument("--plots", type=Path, default=None, help="write fidelity_timeline.png / _ttft_cdf.png here")
    parser.add_argument("--json", dest="json_out", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--base-load",
        type=float,
        default=0.5,
        help="base arrival rate as a fraction of one engine's capacity as calibrated now",
    )
    parser.add_argument("--step", type=float, default=3.0, help="the step's rate over the base rate")
    parser.add_argument("--base-s", type=float, default=60.0)
    parser.add_argument("--step-s", type=float, default=150.0)
    parser.add_argument("--after-s", type=float, default=90.0)
    parser.add_argument("--input-len", type=int, default=96, help="mean prompt words (uniform +-50%%)")
    parser.add_argument("--output-len", type=int, default=32, help="mean output tokens (uniform +-50%%)")
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--replicas-max", type=int, default=3)
    parser.add_argument("--slo-ttft-p95", type=float, default=2.0)
    parser.add_argument("--queue-per-replica", type=int, default=4)
    parser.add_argument("--scale-down-s", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    parser.add_argument(
        "--first-token-timeout",
        type=float,
        default=600.0,
        help="the gateway's first-token limit (its default is 60 s; the simulator has none, so the "
        "default here lets a slow first token be measured instead of answered 504)",
    )
    args = parser.parse_args()
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    print(f"CPU: {cpu_info().summary()}; load average {load_before[0]:.1f}", flush=True)

    print("1. calibrating one engine now ...", flush=True)
    profile, slowdown, calibration = calibrate(args.model, out / "calibration")
    fleet_engine = slowed(profile, slowdown).with_engine(max_num_seqs=args.max_num_seqs)
    capacity = fleet_engine.capacity_rps(args.input_len, args.output_len)
    base_rate = args.base_load * capacity
    print(
        f"   step {profile.step}; engine got {1 / slowdown:.2f} of a core (slowdown {slowdown:.2f}); one engine "
        f"serves ~{capacity:.2f} req/s of this shape now; base {base_rate:.2f} req/s, step {args.step:g}x",
        flush=True,
    )

    from shoal.model_registry import resolve_model
    from shoal.tokenizer.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_source(resolve_model(args.model))
    phases = burst_phases(base_rate, args.step, args.base_s, args.step_s, args.after_s)
    expected = sum(p.seconds * p.rate for p in phases)
    pool = random_dataset(int(expected * 2 + 50), args.input_len, args.output_len, 0.5, args.seed)
    trace, requests = burst_trace(phases, pool, lambda text: len(tokenizer.encode(text)), args.seed)
    trace_path = out / "trace.csv"
    write_trace(trace, trace_path)
    print(f"2. trace {trace_path}: {len(trace)} requests over {trace.duration:.0f} s", flush=True)

    manifest_path = out / "fidelity.yaml"
    manifest_path.write_text(
        manifest_text(
            "fidelity",
            args.model,
            args.max_num_seqs,
            args.replicas_max,
            args.slo_ttft_p95,
            args.queue_per_replica,
            args.scale_down_s,
            args.first_token_timeout,
        )
    )
    manifest = load_manifest(manifest_path)
    log_dir = out / "up"
    up = LocalProcess(shoal_command("up", str(manifest_path), "--no-tui", "--log-dir", str(log_dir)), out / "up.log")
    watch = FleetWatch(log_dir / "dashboard.json")
    try:
        wait_for_fleet(up, watch, 900)
        print(f"3. replaying against shoal up at {up.url} ...", flush=True)
        replay = asyncio.run(
            send_trace(up.url, manifest.spec.served_name, trace, requests, watch, args.timeout, pool[-2:])
        )
    finally:
        up.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.process.wait(timeout=60)
        up.stop()
    measured = measured_run(trace, replay, manifest.spec.gateway.routing_policy)
    late = max(s - a for s, a in zip(replay.sent, trace.arrival.tolist(), strict=True))
    usage = [r.prompt_tokens for r in replay.results if r.success]
    mismatched = sum(
        1 for r, p in zip(replay.results, trace.prompt_tokens, strict=True) if r.success and r.prompt_tokens != p
    )
    startups = watch.startups(after=replay.t0)
    first_startup = watch.startups()
    measured_startups = list(startups.values()) or list(first_startup.values())
    startup_range = (min(measured_startups), max(measured_startups))
    print(
        f"   sent at most {late:.2f} s late; {mismatched} of {len(usage)} prompts counted otherwise by the engine; "
        f"engine start-up to ready {', '.join(f'{n} {s:.1f} s' for n, s in sorted(first_startup.items()))}",
        flush=True,
    )

    print("4. simulating the trace file ...", flush=True)
    replayed = load_trace(trace_path)
    replayed = Trace(
        trace.name,
        replayed.arrival,
        replayed.prompt_tokens,
        replayed.output_tokens,
        replayed.prefix_group,
        replayed.prefix_tokens,
        trace.bursts,
    )
    runs = {
        MEASURED: measured,
        SIM_CALIBRATED: simulate_fleet(replayed, profile, manifest, startup_range, args.seed),
        SIM_LOADED: simulate_fleet(replayed, slowed(profile, slowdown), manifest, startup_range, args.seed),
    }
    replay_share = watch.busy_core_share(replay.t0)
    if replay_share:
        runs[SIM_REPLAY_SHARE] = simulate_fleet(
            replayed, slowed(profile, max(1.0, 1 / replay_share)), manifest, startup_range, args.seed
        )
    report = side_by_side(runs, replayed, args.slo_ttft_p95)
    sim_capacity = replica_capacity(fleet_engine, replayed, args.slo_ttft_p95, args.seed)
    comparison = Comparison(
        replayed,
        fleet_engine,
        args.slo_ttft_p95,
        sim_capacity,
        Sizing(sim_capacity.concurrency, replicas_for(peak_rate(replayed), sim_capacity), sim_capacity.max_rps),
        autoscaling_config(manifest.spec),
        runs,
        {name: entry["summary"] for name, entry in report.items()},
    )  # type: ignore[index]
    cores = watch.cores_per_window(replay.t0)
    load_after = os.getloadavg()
    print(format_table(comparison))
    print(format_side_by_side(report))
    engine_ttft = watch.engine_ttft_per_window(replay.t0)
    print(
        f"engine-side TTFT P95 per minute (the autoscaler's 30 s window, highest sample): "
        f"{' '.join(_cell(v) for v in engine_ttft)}"
    )
    print(
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; serving engines used "
        f"{' '.join(f'{c:.2f}' for c in cores)} cores per minute; a busy engine got "
        f"{_cell(replay_share)} of a core (calibration: {1 / slowdown:.2f})"
    )
    document = {
        "command": " ".join(sys.argv),
        "cpu": cpu_info().summary(),
        "load_average": {"before": load_before, "after": load_after, "during": watch.load},
        "calibration": {**calibration, "slowdown": slowdown, "profile": json.loads(profile.to_json())},
        "trace": {"path": str(trace_path), "requests": len(trace), "phases": [asdict(p) for p in phases]},
        "startup_s": {"measured": first_startup, "during_trace": startups, "simulated_range": startup_range},
        "sent_late_max_s": late,
        "prompt_count_mismatches": mismatched,
        "serving_engine_cores_per_minute": cores,
        "engine_ttft_p95_per_minute": engine_ttft,
        "busy_engine_core_share": replay_share,
        "runs": report,
    }
    if args.json_out:
        args.json_out.write_text(json.dumps(document, indent=1, default=str))
        print(f"wrote {args.json_out}")
    if args.plots:
        from shoal.simulate.plots import write_plots

        for path in write_plots(comparison, args.plots, prefix="fidelity_"):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
