"""``shoal up FILE.yaml``: an InferenceDeployment as local processes, sized live by the operator's autoscaler.

One asyncio loop in this process does everything once per tick (``TICK_S``): the fleet reconciles its engines
(:mod:`shoal.local.fleet`), the engines' metrics become :class:`FleetSignals`, the policy decides the count
(:mod:`shoal.local.autoscaler`), and the resulting snapshot goes to the terminal view (or log lines) and to the
file the gateway's ``/dashboard`` serves. While an engine loads, the fleet alone is ticked every
``STARTING_POLL_S`` too, so it is listed for the gateway as soon as it is ready; a decision is applied at once.
The gateway is a ``shoal gateway`` child following the backends file. Every child dies with this process (``PR_SET_PDEATHSIG``), so even a SIGKILL of ``shoal up`` leaves nothing.
Ctrl-C or SIGTERM stops the gateway and drains the engines (what still streams when ``--stop-grace`` nears its end
is aborted with a clean end); a second one stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import httpx
from rich.console import Console
from rich.live import Live

from shoal.autoscale.policy import ScalingPolicy
from shoal.autoscale.source import MetricsSource, ReplicaPhase, ReplicaTarget
from shoal.cache_dir import shoal_cache
from shoal.engine_kinds import adapter
from shoal.local.autoscaler import LocalAutoscaler
from shoal.local.drain import drain_grace, engine_drain_s
from shoal.local.engines import engine_binary, foreign_argv
from shoal.local.figures import read_extras
from shoal.local.fleet import EngineFleet, EngineLaunch, EngineReplica, Event
from shoal.local.manifest import LocalManifest
from shoal.local.process import LocalProcess, shoal_command
from shoal.local.snapshot import FleetSnapshot, Timeline, take
from shoal.local.threads import threads_per_engine, usable_cores
from shoal.local.view import event_line, render, summary_line
from shoal.operator.builders.engine import serve_args
from shoal.operator.builders.gateway import gateway_flags
from shoal.operator.builders.model import CONVERTED_WEIGHTS_DIR
from shoal.operator.spec import InferenceDeploymentSpec

TICK_S = 1.0
STARTING_POLL_S = 0.2  # while an engine loads, its readiness is polled this often between ticks
SUMMARY_EVERY_S = 10.0
GIVE_UP_AFTER_FAILURES = 3  # crashes in a row of one engine before any was ready: the model will not load


@dataclass(frozen=True)
class UpOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    tui: bool = True
    log_dir: Path | None = None
    api_keys: Path | None = None
    stop_grace_s: float = 30.0


class PortTaken(RuntimeError):
    pass


def check_port(host: str, port: int) -> None:
    """Fails with a clear message when the gateway's port is in use, before anything starts."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortTaken(
                f"port {port} on {host} is already in use ({exc.strerror}); "
                "stop what holds it or pick another with --port"
            ) from exc


def converted_weights_dir() -> Path:
    """Where local engines keep their converted weights, so a second start maps them (``--weights-cache-dir``):
    ``$SHOAL_CACHE/converted-weights``, else ``~/.cache/shoal/converted-weights``."""
    return shoal_cache() / "converted-weights"


def engine_launch(spec: InferenceDeploymentSpec, log_dir: Path) -> EngineLaunch:
    """The operator's own ``shoal serve`` arguments, then the local overrides (the last flag given wins); for
    another engine kind, its own command line from its binary here (:mod:`shoal.local.engines`)."""
    most = (spec.replicas.max + spec.autoscaling.standby) if spec.autoscaling.enabled else spec.replicas.fixed
    threads = threads_per_engine(usable_cores(), most, spec.engine.resources.cpu_limit)
    env = {e.name: e.value for e in spec.engine.env if e.value is not None}  # valueFrom: cluster only
    kind = adapter(spec.engine.kind)
    startup = float(spec.engine.startup_seconds)
    if kind.kind != "shoal":
        argv = foreign_argv(spec, engine_binary(kind.kind), threads)
        if kind.kind == "vllm":  # each engine its share of the cores, not all of them pinned from core 0
            env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(threads), **env}
        return EngineLaunch(argv, env, log_dir, startup, kind.ready_path, kv_events=kind.kv_events == "zmq")
    args = serve_args(spec)
    if spec.adapters:  # no ConfigMap here: each adapter's source on the command line (the engine fetches it)
        at = args.index("--lora-modules-file")
        args[at : at + 2] = ["--lora-modules", *(f"{a.name}={a.source}" for a in spec.adapters)]
    if "--download-dir" in args:  # the pod's /model-cache: here the default cache, where `shoal up` fetched
        at = args.index("--download-dir")
        del args[at : at + 2]
    if "--weights-cache-dir" in args and args[args.index("--weights-cache-dir") + 1] == CONVERTED_WEIGHTS_DIR:
        at = args.index("--weights-cache-dir")
        del args[at : at + 2]
    args[1:1] = ["--weights-cache-dir", str(converted_weights_dir())]  # first: engine.extraArgs may override it
    if "--shutdown-grace" in args:  # the fleet ends each drain's grace itself (shoal.local.drain)
        args[args.index("--shutdown-grace") + 1] = str(engine_drain_s(spec))
    if "--attention-backend" in args:  # a GPU spec's Triton: here the CPU's default (the C kernel, else torch's)
        at = args.index("--attention-backend")
        del args[at : at + 2]
    argv = shoal_command(
        *args,
        "--host",
        "127.0.0.1",
        "--device",
        "cpu",
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    )
    return EngineLaunch(argv, env, log_dir, startup, kind.ready_path, term_ends_grace=True)


def gateway_argv(spec: InferenceDeploymentSpec, options: UpOptions, backends: Path, dashboard: Path) -> list[str]:
    """The flags the operator puts in the gateway's ConfigMap (:func:`gateway_flags`), with the backends file for
    discovery and the model's own source for its tokenizer; the block size the engines run with here, on the CPU."""
    flags = gateway_flags(spec)
    flags["--block-size"] = str(adapter(spec.engine.kind).block_size(spec.engine.block_size, gpus=0))
    argv = shoal_command(
        "gateway",
        "--host",
        options.host,
        "--backends-file",
        str(backends),
        "--dashboard-data",
        str(dashboard),
        "--tokenizer",
        f"{spec.served_name}={spec.model.source}",
        *(arg for pair in flags.items() for arg in pair),
        "--log-level",
        "warning",
    )
    if options.api_keys is not None:
        argv += ["--api-keys", str(options.api_keys)]
    return argv


# A restarting engine is capacity on its way, as a pod in CrashLoopBackOff is: ``starting``. The standby pool is
# not here: the policy never sees it.
POLICY_PHASE: dict[str, ReplicaPhase] = {
    "starting": "starting",
    "backoff": "starting",
    "ready": "ready",
    "draining": "draining",
}


def _target(replica: EngineReplica) -> ReplicaTarget:
    return ReplicaTarget(replica.name, POLICY_PHASE[replica.phase], replica.since, replica.url)


class Up:
    """One running ``shoal up``: the gateway, the engine fleet, the loop that ties them and what it shows."""

    def __init__(
        self,
        manifest: LocalManifest,
        options: UpOptions,
        policy: ScalingPolicy | None,
        make_source: Callable[[httpx.AsyncClient], MetricsSource],
        say: Callable[[str], None],
    ) -> None:
        self.manifest, self.options, self.say = manifest, options, say
        spec = manifest.spec
        self.log_dir = options.log_dir or Path(tempfile.mkdtemp(prefix=f"shoal-up-{manifest.name}-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.backends = self.log_dir / "backends.txt"
        self.backends.write_text("")
        self.dashboard = self.log_dir / "dashboard.json"
        self.url = f"http://{'127.0.0.1' if options.host in ('0.0.0.0', '') else options.host}:{options.port}"
        self.fleet = EngineFleet(
            engine_launch(spec, self.log_dir),
            self.backends,
            drain_grace=partial(drain_grace, spec),
            on_event=self._on_event,
            standby=spec.autoscaling.standby if spec.autoscaling.enabled else 0,
        )
        self.autoscaler = (
            LocalAutoscaler(policy, act=spec.autoscaling.mode == "Act")
            if policy is not None and spec.autoscaling.enabled
            else None
        )
        self.make_source = make_source
        self.source: MetricsSource | None = None
        self.timeline = Timeline(self.dashboard)
        self.gateway: LocalProcess | None = None
        self.snapshot: FleetSnapshot | None = None
        self.stopping = asyncio.Event()
        self.failed: str | None = None
        self._summary_at = 0.0

    def _on_event(self, event: Event) -> None:
        if not self.options.tui:
            self.say(event_line(event))

    def start_gateway(self) -> LocalProcess:
        argv = gateway_argv(self.manifest.spec, self.options, self.backends, self.dashboard)
        gateway = LocalProcess(argv, self.log_dir / "gateway.log", port=self.options.port, die_with_parent=True)
        return gateway.wait_ready("/health", timeout=60)

    async def tick(self, client: httpx.AsyncClient) -> FleetSnapshot:
        now = time.time()
        await self.fleet.tick(now, client)
        if self.gateway is not None and self.gateway.process.poll() is not None:
            self.fleet.emit(now, "error", f"gateway exited with {self.gateway.process.returncode}; restarting")
            try:
                self.gateway = await asyncio.to_thread(self.start_gateway)
            except (RuntimeError, TimeoutError) as error:
                self.failed = f"the gateway exited and did not start again: {error}"
                self.stopping.set()
        engines = [r.url for r in self.fleet.replicas if r.phase in ("ready", "draining") and r.url]
        extras = await read_extras(client, engines, self.url, adapter(self.manifest.spec.engine.kind).metrics)
        assert self.source is not None
        observed = await self.source.observe(
            now, self.fleet.desired, [_target(r) for r in self.fleet.replicas if not r.pooled]
        )
        signals = replace(observed, held_requests=extras.held_requests)
        if signals.tpot_p90_seconds is not None:  # the last one seen sizes the next drain's grace
            self.fleet.tpot_s = signals.tpot_p90_seconds
        if self.autoscaler is not None:
            decision = self.autoscaler.step(signals, self.fleet)
            if decision is not None:
                verb = "scale to" if self.autoscaler.act else "recommend (mode Recommend, not applied)"
                self.fleet.emit(now, "info", f"{verb} {decision.replicas}: {decision.rule}: {decision.message}")
                self.fleet.apply(now)  # start (or drain) now, not a tick later
        decisions = tuple(self.autoscaler.decisions) if self.autoscaler else ()
        spec = self.manifest.spec
        snapshot = take(
            now,
            self.manifest.name,
            spec.served_name,
            self.url,
            self.fleet,
            self.autoscaler is not None,
            signals,
            extras,
            decisions,
            self.autoscaler.last if self.autoscaler else None,
        )
        self.timeline.add(snapshot)
        self.timeline.write(snapshot)
        self._check_model_loads()
        return snapshot

    def _check_model_loads(self) -> None:
        if self.fleet.ever_ready:
            return
        for replica in self.fleet.replicas:
            if replica.failures >= GIVE_UP_AFTER_FAILURES:
                self.failed = (
                    f"{replica.name} failed {replica.failures} times before any engine was ready; "
                    f"the model does not load: {replica.error} (logs in {self.log_dir})"
                )
                self.stopping.set()

    async def run(self, console: Console | None) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._signalled)
        try:
            self.gateway = await asyncio.to_thread(self.start_gateway)
        except (RuntimeError, TimeoutError) as error:
            self.say(f"shoal up: the gateway did not start: {error}")
            return 1
        spec = self.manifest.spec
        self.fleet.scale_to(spec.replicas.min if self.autoscaler else spec.replicas.fixed)
        live = Live(console=console, refresh_per_second=2, transient=False) if console is not None else None
        try:
            async with httpx.AsyncClient() as client:
                self.source = self.make_source(client)
                if live is not None:
                    live.start()
                while not self.stopping.is_set():
                    self.snapshot = await self.tick(client)
                    self._show(self.snapshot, live)
                    await self._between_ticks(client)
        finally:
            if live is not None:
                live.stop()
            await self.shutdown()
        if self.failed:
            self.say(f"shoal up: {self.failed}")
            return 1
        return 0

    async def _between_ticks(self, client: httpx.AsyncClient) -> None:
        """Waits ``TICK_S`` (less when stopping); while an engine is starting, the fleet alone is ticked every
        ``STARTING_POLL_S``, so a ready engine is listed for the gateway within that, not within a tick."""
        end = time.monotonic() + TICK_S
        while not self.stopping.is_set() and (left := end - time.monotonic()) > 0:
            starting = any(r.phase == "starting" for r in self.fleet.replicas)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), min(left, STARTING_POLL_S) if starting else left)
            if starting and not self.stopping.is_set():
                await self.fleet.tick(time.time(), client)

    def _show(self, snapshot: FleetSnapshot, live: Live | None) -> None:
        if live is not None:
            live.update(render(snapshot))
        elif snapshot.time - self._summary_at >= SUMMARY_EVERY_S:
            self._summary_at = snapshot.time
            self.say(summary_line(snapshot))

    def _signalled(self) -> None:
        if self.stopping.is_set():
            self.say("second signal: stopping at once")
            self._kill_all()
            os._exit(130)
        self.say("stopping: the gateway finishes its requests, the engines drain")
        self.stopping.set()

    def _kill_all(self) -> None:
        for replica in self.fleet.replicas:
            if replica.process is not None:
                replica.process.stop()
        if self.gateway is not None:
            self.gateway.stop()

    async def shutdown(self) -> None:
        if self.gateway is not None:
            self.gateway.terminate()
        await self.fleet.stop(self.options.stop_grace_s)
        if self.gateway is not None:
            deadline = time.monotonic() + self.options.stop_grace_s
            while self.gateway.process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            self.gateway.stop()
        self.say(f"stopped; logs in {self.log_dir}")
