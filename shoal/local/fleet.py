"""The local engine fleet: engine processes (``shoal serve``, or the kind's own server) kept at a desired count, as
a Deployment and a kubelet would.

``EngineFleet`` is a reconcile loop driven by ``tick(now)``; everything it does is in one place:

- **start** an engine on a free loopback port (``LocalProcess``, dying with its parent); it is ``starting``
  until its readiness path (``/ready``; the kind's) answers 200, then ``ready``. Only ready engines are written to the backends file the
  gateway follows (``shoal gateway --backends-file``), so nothing is routed to an engine still loading. A kind that
  publishes its KV cache on a ZMQ port (vLLM) gets a free one of its own too (and the next, for its replay socket),
  written beside its URL.
- **crash**: an engine that exits (or is not ready within ``startup_timeout_s``) goes to ``backoff`` with the
  last line of its log as the reason, and is started again after a doubling delay (``RESTART_BACKOFF``, :mod:`shoal.protocol.backoff`).
- **drain**: an engine to remove leaves the backends file first, gets SIGTERM once the gateway has re-read the
  file (``discovery_delay_s``), finishes its in-flight requests (the engine's own SIGTERM drain) and exits. Its
  grace, the kubelet's ``terminationGracePeriodSeconds``, is sized when the drain begins (``drain_grace``: from
  the time per output token the fleet has observed by then, where a pod's is fixed in its template); an engine
  that ends its grace on a second SIGTERM (Shoal's) gets one ``EXIT_SECONDS`` before the grace is over, so what
  still streams is aborted with a clean end, and whatever is left at the end is killed.
- **reconcile**: fewer engines than ``desired`` -> start more; more -> remove, in the order that loses least
  (restarting ones, then ready ones newest first; a loading one only when nothing else is left).
- **standby pool** (``autoscaling.standby``): ``standby`` more engines are started and loaded but never listed,
  and the policy does not see them. A scale-up promotes pool engines first (a ready one is listed at once, a
  loading one keeps loading as a serving engine), starts new engines only for the rest, and refills the pool
  with cold starts off the scale-up's path. Pool engines cost what serving ones do; they are only faster to add.

- **start-up by phase**: each replica's first start is a :class:`StartupRecord` from the decision that raised
  the count to its first served token (:mod:`shoal.local.startup`); its ``/metrics`` page is read after it is
  listed until it has served (at most ``STARTUP_FOLLOW_S``), and the phases become two events: at ready, and at
  the first token.

Everything that happens is an :class:`Event` (shown by the terminal view, printed by ``--no-tui``).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from shoal.engine_kinds.vllm import kv_events_args
from shoal.gateway.discovery import FILE_POLL_S, Backend
from shoal.local.process import LocalProcess, free_port_pair
from shoal.local.startup import StartupRecord, read_engine_startup
from shoal.operator.termination import EXIT_SECONDS
from shoal.protocol.backoff import Backoff

Phase = Literal["starting", "ready", "standby", "draining", "backoff"]  # standby: a ready pool engine, not listed
EVENTS_KEPT = 50
# Doubling like a kubelet's CrashLoopBackOff, so a broken model does not spin the machine while a one-off crash
# recovers at once; no jitter: one supervisor restarts its own engines.
RESTART_BACKOFF = Backoff(initial_s=1.0, cap_s=30.0)
STARTUP_FOLLOW_S = 120.0  # how long after listing a replica its page is read for its first token


@dataclass(frozen=True)
class Event:
    time: float
    level: Literal["info", "warning", "error"]
    text: str


@dataclass(frozen=True)
class EngineLaunch:
    """How to start one engine: ``argv`` without ``--port``, extra environment, where logs go, and the path
    that answers 200 once it is ready (the engine kind's)."""

    argv: list[str]
    env: dict[str, str]
    log_dir: Path
    startup_timeout_s: float
    ready_path: str = "/ready"
    kv_events: bool = False  # each engine publishes its KV cache on a ZMQ port of its own (vLLM's flag)
    term_ends_grace: bool = False  # a second SIGTERM aborts what the engine still streams, cleanly (shoal serve)


@dataclass(frozen=True)
class DrainGrace:
    """How long a draining engine may take before it is killed, and why that long (said in its event)."""

    seconds: float
    why: str
    warning: str | None = None  # a request of maxModelLen tokens could outlast it (DrainFits' message)


@dataclass
class EngineReplica:
    name: str
    phase: Phase
    since: float
    process: LocalProcess | None = None
    starts: int = 0
    failures: int = 0  # crashes in a row since it was last ready
    error: str | None = None
    retry_at: float = 0.0
    term_at: float | None = None
    signalled: bool = False
    end_grace_at: float | None = None  # when a draining engine is told its grace is over (a second SIGTERM)
    kill_at: float | None = None  # when a draining engine still running is killed
    kv_events_port: int | None = None
    startup: StartupRecord | None = None  # its first start, by phase
    pooled: bool = False  # in the standby pool: started, never listed, unseen by the policy

    @property
    def url(self) -> str | None:
        return self.process.url if self.process is not None else None

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    def exited(self) -> bool:
        return self.process is None or self.process.process.poll() is not None


def _last_line(process: LocalProcess) -> str:
    lines = [line.strip() for line in process.log(4000).splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


@dataclass
class EngineFleet:
    launch: EngineLaunch
    backends_file: Path
    backoff: Backoff = RESTART_BACKOFF
    discovery_delay_s: float = 4 * FILE_POLL_S  # the gateway has re-read the backends file by then
    drain_grace: Callable[[float | None], DrainGrace] = lambda _tpot: DrainGrace(45.0, "the default")
    tpot_s: float | None = None  # the fleet's observed time per output token (P90), when known
    on_event: Callable[[Event], None] | None = None
    desired: int = 0
    standby: int = 0  # the standby pool's size (autoscaling.standby)
    replicas: list[EngineReplica] = field(default_factory=list)
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    ever_ready: bool = False
    _next_index: int = 0
    _written: list[Backend] | None = None
    _raised_at: float | None = None  # when ``desired`` last went up: the decision new replicas start from

    def emit(self, now: float, level: Literal["info", "warning", "error"], text: str) -> None:
        event = Event(now, level, text)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def scale_to(self, count: int, now: float | None = None) -> None:
        if count > self.desired:
            self._raised_at = time.time() if now is None else now
        self.desired = count

    def active(self) -> list[EngineReplica]:
        """The replicas that count toward ``desired``: all but the draining ones and the standby pool."""
        return [r for r in self.replicas if r.phase != "draining" and not r.pooled]

    def pool(self) -> list[EngineReplica]:
        """The standby pool: loading, ready (``standby``) or restarting, never listed."""
        return [r for r in self.replicas if r.pooled]

    def ready_backends(self) -> list[Backend]:
        return [Backend(r.url, r.kv_events_port) for r in self.replicas if r.phase == "ready" and r.url is not None]

    async def tick(self, now: float, client: httpx.AsyncClient) -> None:
        await self._observe(now, client)
        self._restart_due(now)
        self._finish_drains(now)
        self.apply(now)
        await self._follow_startups(now, client)

    def apply(self, now: float) -> None:
        """Starts or removes engines toward ``desired`` and lists the ready ones: at once after a decision."""
        self._reconcile(now)
        self._write_backends()

    def _start(self, replica: EngineReplica, now: float) -> None:
        replica.starts += 1
        suffix = "" if replica.starts == 1 else f".restart{replica.restarts}"
        log_path = self.launch.log_dir / f"{replica.name}{suffix}.log"
        argv = self.launch.argv
        if self.launch.kv_events:
            replica.kv_events_port = free_port_pair()
            argv = [*argv, *kv_events_args(replica.kv_events_port)]
        replica.process = LocalProcess(argv, log_path, self.launch.env, die_with_parent=True)
        replica.phase, replica.since = "starting", now
        if replica.startup is not None and replica.starts == 1:
            replica.startup.spawned = time.time()

    def _crashed(self, replica: EngineReplica, now: float, why: str) -> None:
        if replica.startup is not None and not replica.startup.complete:
            replica.startup = None  # a restart is not the start the decision asked for
        replica.failures += 1
        replica.error = why
        delay = self.backoff.base(replica.failures)
        replica.phase, replica.since, replica.retry_at = "backoff", now, now + delay
        self.emit(now, "error", f"{replica.name} {why}; restart {replica.starts} in {delay:.0f} s")

    async def _observe(self, now: float, client: httpx.AsyncClient) -> None:
        starting = [r for r in self.replicas if r.phase == "starting" and r.process is not None]
        path = self.launch.ready_path
        answers = await asyncio.gather(*(_is_ready(client, (r.url or "") + path) for r in starting))
        for replica, ready in zip(starting, answers, strict=True):
            assert replica.process is not None
            if replica.exited():
                code = replica.process.process.returncode
                self._crashed(replica, now, f"exited with {code} while loading: {_last_line(replica.process)}")
            elif ready:
                replica.phase, replica.since, replica.failures = "standby" if replica.pooled else "ready", now, 0
                self.ever_ready = True
                held = ", held in the standby pool" if replica.pooled else ""
                self.emit(now, "info", f"{replica.name} ready at {replica.url}{held}")
            elif now - replica.since > self.launch.startup_timeout_s:
                replica.process.stop()
                self._crashed(replica, now, f"not ready after {self.launch.startup_timeout_s:.0f} s")
        for replica in self.replicas:
            if replica.phase in ("ready", "standby") and replica.exited():
                assert replica.process is not None
                code = replica.process.process.returncode
                self._crashed(replica, now, f"exited with {code}: {_last_line(replica.process)}")

    def _restart_due(self, now: float) -> None:
        for replica in self.replicas:
            if replica.phase == "backoff" and now >= replica.retry_at:
                self._start(replica, now)
                self.emit(now, "info", f"{replica.name} restarting (restart {replica.restarts})")

    def _finish_drains(self, now: float) -> None:
        for replica in [r for r in self.replicas if r.phase == "draining"]:
            process = replica.process
            if process is None or replica.exited():
                self.replicas.remove(replica)
                self.emit(now, "info", f"{replica.name} drained and stopped")
            elif not replica.signalled and replica.term_at is not None and now >= replica.term_at:
                process.terminate()
                replica.signalled = True
            elif replica.kill_at is not None and now >= replica.kill_at:
                process.stop()
            elif replica.end_grace_at is not None and now >= replica.end_grace_at:
                process.terminate()
                replica.end_grace_at = None
                self.emit(now, "warning", f"{replica.name}'s grace is over: what it still streams is aborted")

    def _reconcile(self, now: float) -> None:
        decided = self._raised_at if self._raised_at is not None else now
        for replica in self._promotable()[: max(0, self.desired - len(self.active()))]:
            self._promote(replica, now, decided)
        active = self.active()
        for _ in range(self.desired - len(active)):
            replica = self._new_replica(now, pooled=False, startup=StartupRecord(decided=decided))
            self.emit(now, "info", f"{replica.name} starting")
        order = {"backoff": 0, "ready": 1, "starting": 2}
        victims = sorted(active, key=lambda r: (order[r.phase], -r.since))[: max(0, len(active) - self.desired)]
        for replica in victims:
            self._remove(replica, now)
        self._refill_pool(now)

    def _new_replica(self, now: float, pooled: bool, startup: StartupRecord | None = None) -> EngineReplica:
        replica = EngineReplica(f"engine-{self._next_index}", "starting", now, startup=startup, pooled=pooled)
        self._next_index += 1
        self.replicas.append(replica)
        self._start(replica, now)
        return replica

    def _promotable(self) -> list[EngineReplica]:
        """Pool engines a scale-up takes, the ready ones first, then the loading ones furthest along."""
        order = {"standby": 0, "starting": 1}
        return sorted((r for r in self.pool() if r.phase in order), key=lambda r: (order[r.phase], r.since))

    def _promote(self, replica: EngineReplica, now: float, decided: float) -> None:
        replica.pooled = False
        replica.startup = StartupRecord(decided=decided, promoted=True)
        if replica.phase == "standby":
            replica.phase, replica.since = "ready", now
        self.emit(now, "info", f"{replica.name} promoted from the standby pool ({replica.phase})")

    def _refill_pool(self, now: float) -> None:
        """Cold starts until the pool holds ``standby`` again, off the scale-up's path."""
        for _ in range(self.standby - len(self.pool())):
            replica = self._new_replica(now, pooled=True)
            self.emit(now, "info", f"{replica.name} starting for the standby pool")

    def _remove(self, replica: EngineReplica, now: float) -> None:
        if replica.phase == "ready":
            grace = self.drain_grace(self.tpot_s)
            replica.phase, replica.since = "draining", now
            replica.term_at = now + self.discovery_delay_s
            replica.kill_at = now + grace.seconds
            if self.launch.term_ends_grace:
                replica.end_grace_at = max(replica.term_at, replica.kill_at - EXIT_SECONDS)
            self.emit(now, "info", f"{replica.name} draining, for up to {grace.seconds:.0f} s ({grace.why})")
            if grace.warning is not None:
                self.emit(now, "warning", grace.warning)
            return
        if replica.process is not None:
            replica.process.stop()
        self.replicas.remove(replica)
        self.emit(now, "info", f"{replica.name} removed while {replica.phase}")

    def _write_backends(self) -> None:
        backends = self.ready_backends()
        if backends == self._written:
            return
        temporary = self.backends_file.with_suffix(".tmp")
        temporary.write_text("".join(f"{backend.line()}\n" for backend in backends))
        os.replace(temporary, self.backends_file)
        self._written = backends
        listed = time.time()
        for replica in self.replicas:
            if replica.phase == "ready" and replica.startup is not None and replica.startup.listed is None:
                replica.startup.listed = listed

    async def _follow_startups(self, now: float, client: httpx.AsyncClient) -> None:
        """Reads each listed replica's start-up from its page until it has served (or ``STARTUP_FOLLOW_S``)."""
        following = [
            r
            for r in self.replicas
            if r.phase == "ready"
            and r.url is not None
            and r.startup is not None
            and r.startup.listed is not None
            and not r.startup.complete
            and now - r.startup.listed < STARTUP_FOLLOW_S
        ]
        pages = await asyncio.gather(*(read_engine_startup(client, r.url or "") for r in following))
        for replica, engine in zip(following, pages, strict=True):
            record = replica.startup
            if engine is None or record is None:
                continue
            was_ready = record.engine.ready is not None
            record.engine = engine
            if record.complete or (engine.ready is not None and not was_ready):
                self.emit(now, "info", f"{replica.name} {record.summary()}")

    async def stop(self, grace_s: float) -> None:
        """SIGTERM every engine (each drains its in-flight requests); ``EXIT_SECONDS`` (at most half the grace)
        before ``grace_s`` is over, a second SIGTERM to the engines that end their grace on one, so what they still
        stream ends cleanly; then SIGKILL whatever is left."""
        self.desired = self.standby = 0
        running = [r.process for r in self.replicas if r.process is not None and not r.exited()]
        for process in running:
            process.terminate()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        end_grace_at = deadline - min(EXIT_SECONDS, grace_s / 2) if self.launch.term_ends_grace else math.inf
        while any(p.process.poll() is None for p in running) and loop.time() < deadline:
            if loop.time() >= end_grace_at:
                for process in running:
                    if process.process.poll() is None:
                        process.terminate()
                end_grace_at = math.inf
            await asyncio.sleep(0.1)
        for process in running:
            process.stop()
        self.replicas.clear()
        self._write_backends()


async def _is_ready(client: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await client.get(url, timeout=1.0)).status_code == 200
    except httpx.HTTPError:
        return False
