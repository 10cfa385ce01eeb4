"""The fleet simulator: a trace replayed through a gateway, a fleet of simulated engines and an autoscaler.

Discrete events on one clock, deterministic for a seed:

- an **arrival** is routed by the real routing policy object (``shoal.gateway.routing``) over views of the ready
  replicas built and charged as the gateway's ``Fleet`` does (uncached prompt tokens until the first token,
  sequences in flight, the capacity each engine announces, what each holds in its prefix cache or has in
  flight); with no ready replica the gateway holds it (scale from zero), up to a limit and a wait;
- a replica's **step** (or decode segment, see :mod:`shoal.simulate.replica`) ends: first tokens and finished
  requests are recorded;
- the **autoscaler tick**, at the policy's own period, hands the real policy object a ``FleetSignals`` built as
  the production sources build it (:mod:`shoal.simulate.observe`) and applies its decision: new replicas start
  and become ready after a start-up time drawn as the start-up mode says (:mod:`shoal.simulate.startup_modes`:
  cold, node-cached, or promoted from a standby pool that the policy does not see); removed ones leave the routing
  set, hand back every request with no token out yet (the draining engine refuses them and the gateway retries them
  on another replica, or holds them when none is ready), finish what is streaming, and abort what is left at the
  engine's drain deadline inside the pod's termination grace, sized as the operator sizes it
  (:func:`drain_deadline_s`);
- a **replica ready** event puts a started replica into rotation and releases held requests.

Every request ends served, dropped with a reason (``exceeds_kv_capacity``, ``hold_full``, ``hold_timeout``,
``drain_timeout``) or still in flight when the simulation stops (``tail_s`` after the last arrival).
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.policy import ScalingPolicy
from shoal.engine_kinds import adapter
from shoal.gateway.fleet_index import FleetIndex
from shoal.gateway.routing import IdOrdered, ReplicaView, RouteRequest, RoutingPolicy
from shoal.operator.termination import PRESTOP_SLEEP_SECONDS, termination
from shoal.simulate.observe import SignalWindow, observe
from shoal.simulate.profile import EngineProfile
from shoal.simulate.replica import BLOCK_TOKENS, GROUP_SHIFT, SimReplica, capacity_of
from shoal.simulate.startup_modes import COLD, StartupMode
from shoal.simulate.trace import Trace

DROP_REASONS = ("exceeds_kv_capacity", "hold_full", "hold_timeout", "drain_timeout")
DEFAULT_PERIOD_S = 10.0  # a policy without ``period_seconds`` runs as the operator runs it (--resync-seconds)
_STEP, _TICK, _READY, _DRAIN_DEADLINE, _SAMPLE = range(5)
# Routable replicas from which an indexed routing policy gets the ``FleetIndex``, which decides exactly as the
# plain scan: keeping it current costs as much as the scan saves at 8 replicas, and it is 1.2x faster at 16
# (prefix-aware, ``bench/simulate_scale.py``'s trace); the presets run 2 to 15.
INDEXED_FROM = 10


@dataclass(frozen=True)
class SimConfig:
    """How the simulated fleet behaves around the engines (the engines themselves are the profile)."""

    seed: int = 0
    initial_replicas: int = 1
    rate_window_s: float = 10.0
    ttft_window_s: float = 30.0
    hold_limit: int = 1024
    hold_timeout_s: float = 300.0
    drain_grace_s: float | None = None  # None: sized as the operator sizes it, see drain_deadline_s
    tail_s: float = 1800.0
    sample_s: float = 5.0
    engine_kind: str = "shoal"  # whose metrics the autoscaler reads (shoal.engine_kinds): what it cannot see
    startup: StartupMode = COLD

    def __post_init__(self) -> None:
        if self.initial_replicas < 0:
            raise ValueError(f"initial_replicas must be >= 0, got {self.initial_replicas}")
        for key in ("rate_window_s", "ttft_window_s", "hold_timeout_s", "drain_grace_s", "tail_s", "sample_s"):
            if getattr(self, key) is not None and not getattr(self, key) > 0:
                raise ValueError(f"{key} must be > 0, got {getattr(self, key)}")


@dataclass
class SimRun:
    """The raw record of one simulation: per request, per decision, per replica, and the fleet over time."""

    policy: str
    routing: str
    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    output_tokens: np.ndarray
    dropped: dict[int, str]
    decisions: list[ScalingDecision]
    replica_spans: list[tuple[float, float]]
    timeline: np.ndarray  # rows of (time, desired, ready, starting, draining)
    route_reasons: Counter[str]
    prompt_tokens_total: int
    prefill_tokens_saved: int
    end_time: float
    per_replica_requests: list[int] = field(default_factory=list)
    standby_spans: list[tuple[float, float]] = field(default_factory=list)  # each replica's time in the pool

    @property
    def in_flight(self) -> int:
        return int(np.isnan(self.finish).sum()) - len(self.dropped)


class FleetSimulator:
    """One run of one scaling policy and one routing policy over one trace (see the module docstring)."""

    def __init__(
        self,
        trace: Trace,
        profile: EngineProfile,
        policy: ScalingPolicy,
        routing: RoutingPolicy,
        config: SimConfig = SimConfig(),
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.trace = trace
        self.profile = profile
        self.policy = policy
        self.routing = routing
        self.config = config
        self.progress = progress
        self.rng = np.random.default_rng(config.seed)
        n = len(trace)
        self.arrival: list[float] = trace.arrival.tolist()
        self.prompt: list[int] = trace.prompt_tokens.tolist()
        self.output: list[int] = trace.output_tokens.tolist()
        self.group: list[int] = trace.prefix_group.tolist()
        self.prefix: list[int] = trace.prefix_tokens.tolist()
        self.first_token = [math.nan] * n
        self.finish = [math.nan] * n
        self.routed_to: list[SimReplica | None] = [None] * n
        self.prefill_charge = [0] * n  # what each request's lease holds on its replica until its first token
        self.capacity = capacity_of(profile)
        self.dropped: dict[int, str] = {}
        self.replicas: list[SimReplica] = []
        self.finished_spans: list[tuple[float, float]] = []
        self.standby: list[SimReplica] = []  # started, not routed, unseen by the policy; loaded from ``since`` on
        self.standby_spans: list[tuple[float, float]] = []
        self.routable: list[SimReplica] = []
        self.views: IdOrdered = IdOrdered()  # the routable replicas' views (``SimReplica.view``), by name
        # kept for a policy that can use it (prefix-aware: holders and load order, not a scan per request); the
        # views are handed over it from INDEXED_FROM routable replicas on, its holders told of every route always
        self.index = FleetIndex() if getattr(routing, "indexed", False) else None
        self.indexing = False  # whether ``views`` is the index now
        self._stale: dict[str, ReplicaView] = {}  # views changed since the index last saw them (``_refresh``)
        self.by_name: dict[str, SimReplica] = {}
        self.desired = 0
        self.held: deque[int] = deque()
        self.window = SignalWindow(config.rate_window_s, config.ttft_window_s)
        self.metrics = adapter(config.engine_kind).metrics
        self.decisions: list[ScalingDecision] = []
        self.timeline: list[tuple[float, int, int, int, int]] = []
        self.route_reasons: Counter[str] = Counter()
        self.prefill_saved = 0
        self.heap: list[tuple[float, int, int, object, int]] = []
        self._seq = itertools.count(1)  # ties in time go in the order pushed
        self._names = 0
        self._hashes: dict[int, tuple[int, ...]] = {}
        self.outstanding = 0
        self.now = 0.0
        self.drain_s = config.drain_grace_s if config.drain_grace_s is not None else drain_deadline_s(profile, trace)

    # -- the event queue -------------------------------------------------------------------------------------
    def _push(self, time: float, kind: int, obj: object = None, version: int = 0) -> None:
        heapq.heappush(self.heap, (time, next(self._seq), kind, obj, version))

    def run(self) -> SimRun:
        """Replays the trace. The cyclic garbage collector is off meanwhile: the loop allocates millions of
        short-lived tuples and lists that form no cycles, and scanning them cost about a tenth of the run."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if collecting:
                gc.enable()

    def _run(self) -> SimRun:
        arrival = self.arrival
        n = len(arrival)
        self._start_replicas(self.config.initial_replicas, ready=True)
        self.desired = self.config.initial_replicas
        self._fill_standby(loaded=True)  # the pool was there before the trace began, like the warm fleet
        period = float(getattr(self.policy, "period_seconds", DEFAULT_PERIOD_S))
        self._push(period, _TICK, period)  # the first decision sees one period of traffic, as a running fleet would
        self._push(0.0, _SAMPLE)
        stop_at = (arrival[-1] if n else 0.0) + self.config.tail_s
        heap, heappop = self.heap, heapq.heappop
        ai = 0
        while True:
            next_arrival = arrival[ai] if ai < n else math.inf
            if heap and heap[0][0] <= next_arrival:
                time, _, kind, obj, version = heappop(heap)
                if time > stop_at:
                    break
                self.now = time
                if kind == _STEP:
                    replica = obj
                    assert isinstance(replica, SimReplica)
                    if version == replica.version:
                        self._step_done(replica)
                elif kind == _TICK:
                    self._tick(float(obj))  # type: ignore[arg-type]
                elif kind == _READY:
                    self._ready(obj)  # type: ignore[arg-type]
                elif kind == _DRAIN_DEADLINE:
                    self._drain_deadline(obj)  # type: ignore[arg-type]
                else:
                    self._sample()
            elif ai < n:
                self.now = next_arrival
                self.outstanding += 1
                self._arrive(ai)
                ai += 1
                if self.progress is not None and ai % 4096 == 0:
                    self.progress(next_arrival)
            else:
                break
            if ai == n and self.outstanding == 0:
                break
        return self._record(min(self.now, stop_at))

    # -- requests --------------------------------------------------------------------------------------------
    def _arrive(self, rid: int) -> None:
        self.window.arrived(self.now)
        if self.prompt[rid] + self.output[rid] > self.profile.kv_capacity_tokens:
            self._drop(rid, "exceeds_kv_capacity")
        else:
            self._place(rid)

    def _place(self, rid: int) -> None:
        """Routes a request, or holds it while no replica is ready (scale from zero)."""
        if not self.routable:
            if len(self.held) >= self.config.hold_limit:
                self._drop(rid, "hold_full")
            else:
                self.held.append(rid)
        else:
            self._route(rid)

    def _block_hashes(self, rid: int) -> tuple[int, ...]:
        group = self.group[rid]
        unique = (1 << 62) + rid
        if group < 0:
            return (unique,)
        blocks = self.prefix[rid] // BLOCK_TOKENS
        key = (group << 20) | blocks
        prefix = self._hashes.get(key)
        if prefix is None:
            prefix = tuple((group << GROUP_SHIFT) | i for i in range(blocks))
            self._hashes[key] = prefix
        return (*prefix, unique)

    def _refresh(self, replica: SimReplica) -> None:
        """Brings one replica's routing view up to its load, in place (the others stay as they are). The index
        is told at the next routing decision, once per view however often it changed meanwhile (a replica
        steps several times between two arrivals): its state depends only on the views it is told of."""
        view = replica.view
        view.load_tokens = replica.load_tokens
        view.sequences = replica.in_flight
        view.homes = replica.cache.homes
        if self.indexing:
            self._stale[view.replica_id] = view

    def _rotation_changed(self) -> None:
        self.routable.sort(key=lambda r: r.name)
        self.indexing = self.index is not None and len(self.routable) >= INDEXED_FROM
        if self.index is not None and self.indexing:
            self.index.reset(r.view for r in self.routable)
            self._stale.clear()  # the reset read every view in the rotation as it is now
            self.views = self.index
        else:
            self.views = IdOrdered(r.view for r in self.routable)

    def _route(self, rid: int) -> None:
        """Places a request as the gateway does, and charges the replica as its lease does (``Fleet.acquire``: a
        replica that announces its capacity, as these do, is charged the prompt tokens it still has to compute;
        its sequence counts through ``in_flight``)."""
        prompt, output = self.prompt[rid], self.output[rid]
        hashes = self._block_hashes(rid)
        request = RouteRequest(hashes, prompt + output, BLOCK_TOKENS, output)
        if self._stale and self.index is not None:
            changed = self.index.changed
            for view in self._stale.values():
                changed(view)
            self._stale.clear()
        decision = self.routing.decide(self.views, request)
        self.route_reasons[decision.reason] += 1
        replica = self.by_name[decision.replica_id]
        self.routed_to[rid] = replica
        prefill = request.tokens_on(self.capacity, decision.matched_blocks)
        self.prefill_charge[rid] = prefill
        replica.load_tokens += prefill
        replica.in_flight += 1
        group = self.group[rid]
        if group >= 0:
            replica.cache.routed(group, self.prefix[rid])
            if self.index is not None:
                self.index.may_hold(replica.view, hashes[0])
        else:
            replica.cache.one_off += 1
        self._refresh(replica)
        waiting = replica.waiting
        waiting.append(rid)
        if replica.busy_until is None:
            self._plan(replica)
        elif replica.segment is not None:
            head = waiting[0]
            if replica.can_admit(self.prompt[head] + self.output[head]):
                end = replica.cut(self.now)
                if end is not None:
                    heapq.heappush(self.heap, (end, next(self._seq), _STEP, replica, replica.version))

    def _plan(self, replica: SimReplica) -> None:
        if replica.waiting:
            before = replica.context
            replica.admit(self.prompt, self.output, self.group, self.prefix)
            self.prefill_saved += replica.context - before
        end = replica.plan(self.now, self.prompt)
        if end is not None:
            heapq.heappush(self.heap, (end, next(self._seq), _STEP, replica, replica.version))

    def _step_done(self, replica: SimReplica) -> None:
        now = self.now
        first, finished, produced = replica.finish_step(self.prompt, self.output)
        window = self.window
        window.produced(now, produced)
        if first or finished:
            prefill_charge, group_of = self.prefill_charge, self.group
            for rid in first:
                self.first_token[rid] = now
                replica.load_tokens -= prefill_charge[rid]  # the first byte is back: Fleet.prefilled
                prefill_charge[rid] = 0
                window.first_token(now, now - self.arrival[rid])
                group = group_of[rid]
                if group >= 0:
                    replica.cache.store(group, self.prefix[rid], self.profile.kv_capacity_tokens - replica.reserved)
            finish, cache = self.finish, replica.cache
            output, first_token = self.output, self.first_token
            for rid in finished:  # released as a lease is: its prefill charge went with its first token
                finish[rid] = now
                if output[rid] > 1:
                    window.finished(now, (now - first_token[rid]) / (output[rid] - 1))
                group = group_of[rid]
                if group >= 0:
                    cache.finished(group)
                else:
                    cache.one_off -= 1
            replica.in_flight -= len(finished)
            self.outstanding -= len(finished)
            self._refresh(replica)
        if replica.phase == "draining" and replica.in_flight == 0:
            self._end(replica)
        else:
            self._plan(replica)

    def _drop(self, rid: int, reason: str) -> None:
        self.dropped[rid] = reason
        self.outstanding -= 1

    # -- the fleet -------------------------------------------------------------------------------------------
    def _new_replica(self) -> SimReplica:
        self._names += 1
        replica = SimReplica(f"replica-{self._names:05d}", self.profile, self.now)
        self.by_name[replica.name] = replica
        return replica

    def _start_time(self) -> float:
        low, high = self.config.startup.start_range(self.profile.startup_s)
        return float(self.rng.uniform(low, high))

    def _start_replicas(self, count: int, ready: bool = False) -> None:
        promote_s = self.config.startup.promote_s
        for _ in range(count):
            promoted = None if ready or not self.standby else self._promote()
            replica = promoted or self._new_replica()
            self.replicas.append(replica)
            if ready:
                replica.phase = "ready"
                self.routable.append(replica)
            elif promoted is not None:  # loaded: ready once promoted; still loading: once loaded and promoted
                self._push(max(self.now, promoted.since) + promote_s, _READY, replica)
                # starting since, as the operator reports a pod: a loaded one from its promotion, a loading one from
                # its creation (reported from its load's end, it taught the policy that start-ups take 2 s)
                replica.since = self.now if promoted.since <= self.now else promoted.created
            else:
                self._push(self.now + self._start_time(), _READY, replica)
        if ready:
            self._rotation_changed()

    # -- the standby pool --------------------------------------------------------------------------------------
    def _fill_standby(self, loaded: bool = False) -> None:
        """Starts standby replicas until the pool holds ``standby`` (cold starts, off the scale-up's path)."""
        while len(self.standby) < self.config.startup.standby:
            replica = self._new_replica()
            replica.since = self.now if loaded else self.now + float(self.rng.uniform(*self.profile.startup_s))
            self.standby.append(replica)

    def _promote(self) -> SimReplica:
        """Takes the pool's replica loaded first (or loading the longest) and starts its replacement."""
        replica = min(self.standby, key=lambda r: r.since)
        self.standby.remove(replica)
        self.standby_spans.append((replica.created, max(self.now, replica.since)))
        self._fill_standby()
        return replica

    def _ready(self, replica: SimReplica) -> None:
        if replica.phase != "starting":
            return
        replica.phase = "ready"
        replica.since = self.now
        self.routable.append(replica)
        self._rotation_changed()
        while self.held and self.routable:
            self._route(self.held.popleft())

    def _tick(self, period: float) -> None:
        now = self.now
        while self.held and now - self.arrival[self.held[0]] > self.config.hold_timeout_s:
            self._drop(self.held.popleft(), "hold_timeout")
        signals = observe(now, self.desired, self.replicas, self.window, len(self.held), self.metrics)
        decision = self.policy.decide(signals)
        self.decisions.append(decision)
        self._scale_to(decision.replicas)
        self._push(now + period, _TICK, period)

    def _scale_to(self, desired: int) -> None:
        alive = [r for r in self.replicas if r.phase in ("starting", "ready")]
        self.desired = desired
        if desired > len(alive):
            self._start_replicas(desired - len(alive))
            return
        # As a ReplicaSet does: pods not ready go first, then the newest.
        doomed = sorted(alive, key=lambda r: (r.phase == "ready", -r.created, r.name))[: len(alive) - desired]
        refused: list[int] = []
        for replica in doomed:
            if replica.phase == "starting":
                replica.phase = "draining"
                self._end(replica)
                continue
            replica.phase = "draining"
            replica.since = self.now
            self.routable.remove(replica)
            refused += self._refuse_unstarted(replica)
            if replica.in_flight == 0:
                self._end(replica)
            else:
                self._push(self.now + self.drain_s, _DRAIN_DEADLINE, replica)
        self._rotation_changed()
        for rid in sorted(refused):  # the gateway's retry before the first byte, in arrival order
            self._place(rid)

    def _refuse_unstarted(self, replica: SimReplica) -> list[int]:
        """A draining replica's requests with no token out, released as their leases are (``Fleet.release``)."""
        refused = replica.release_unstarted(self.prompt, self.output)
        for rid in refused:
            replica.load_tokens -= self.prefill_charge[rid]
            self.prefill_charge[rid] = 0
            group = self.group[rid]
            if group >= 0:
                replica.cache.finished(group)
            else:
                replica.cache.one_off -= 1
            self.routed_to[rid] = None
        replica.in_flight -= len(refused)
        self._refresh(replica)
        return refused

    def _drain_deadline(self, replica: SimReplica) -> None:
        if replica.ended is not None:
            return
        aborted = list(replica.waiting) + [e[0] for e in replica.prefill] + [rid for _, rid in replica.decoding]
        for rid in aborted:
            self.dropped[rid] = "drain_timeout"
        self.outstanding -= len(aborted)
        self._end(replica)

    def _end(self, replica: SimReplica) -> None:
        replica.ended = self.now
        replica.version += 1
        if replica in self.replicas:
            self.replicas.remove(replica)
            self.finished_spans.append((replica.created, self.now))

    def _sample(self) -> None:
        phases = Counter(r.phase for r in self.replicas)
        self.timeline.append((self.now, self.desired, phases["ready"], phases["starting"], phases["draining"]))
        self._push(self.now + self.config.sample_s, _SAMPLE)

    def _record(self, end: float) -> SimRun:
        spans = self.finished_spans + [(r.created, end) for r in self.replicas + self.standby]
        standby_spans = self.standby_spans + [(r.created, end) for r in self.standby]
        counts = Counter(r.name for r in self.routed_to if r is not None)
        return SimRun(
            policy=str(getattr(self.policy, "name", type(self.policy).__name__)),
            routing=self.routing.name,
            arrival=self.trace.arrival,
            first_token=np.asarray(self.first_token),
            finish=np.asarray(self.finish),
            output_tokens=self.trace.output_tokens,
            dropped=self.dropped,
            decisions=self.decisions,
            replica_spans=spans,
            timeline=np.asarray(self.timeline, dtype=np.float64).reshape(-1, 5),
            route_reasons=self.route_reasons,
            prompt_tokens_total=int(self.trace.prompt_tokens.sum()),
            prefill_tokens_saved=self.prefill_saved,
            end_time=end,
            per_replica_requests=sorted(counts.values(), reverse=True),
            standby_spans=standby_spans,
        )


def drain_deadline_s(profile: EngineProfile, trace: Trace) -> float:
    """When a draining replica aborts what it still streams, from when it left the routing set: the preStop sleep
    and the engine's drain of the pod's termination grace (:func:`shoal.operator.termination.termination`), for
    the trace's longest request (its ``maxModelLen``, at most the KV cache) at the time per output token of a full
    batch over a full KV cache."""
    longest = int((trace.prompt_tokens + trace.output_tokens).max()) if len(trace) else 1
    max_model_len = min(longest, profile.kv_capacity_tokens)
    tpot = profile.step.seconds(0, profile.max_num_seqs, profile.kv_capacity_tokens)
    return float(PRESTOP_SLEEP_SECONDS + termination(max_model_len, tpot, gpus=0, explicit_grace_s=None).drain_s)


def simulate(
    trace: Trace,
    profile: EngineProfile,
    policy: ScalingPolicy,
    routing: RoutingPolicy,
    config: SimConfig = SimConfig(),
    progress: Callable[[float], None] | None = None,
) -> SimRun:
    """Runs one simulation (see :class:`FleetSimulator`)."""
    return FleetSimulator(trace, profile, policy, routing, config, progress).run()
