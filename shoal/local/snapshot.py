"""What ``shoal up`` shows, as plain data: one :class:`FleetSnapshot` per tick for the terminal view, and a
:class:`Timeline` of compact samples that the gateway's ``/dashboard`` charts.

The terminal view and the dashboard read the same snapshot, so they never disagree. The timeline is written as
one JSON file (replaced atomically) that ``shoal gateway --dashboard-data`` serves to the page.
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

from shoal.autoscale.decision import ScalingDecision
from shoal.autoscale.signals import FleetSignals
from shoal.local.figures import Extras
from shoal.local.fleet import EngineFleet, EngineReplica, Event

SAMPLES_KEPT = 600


@dataclass(frozen=True)
class ReplicaRow:
    name: str
    phase: str
    since: float
    url: str | None
    pid: int | None
    waiting: float | None
    running: float | None
    kv_usage: float | None
    restarts: int
    error: str | None
    startup: dict[str, float] = field(default_factory=dict)  # its first start by phase (shoal.local.startup)


@dataclass(frozen=True)
class DecisionRow:
    """One evaluation of the policy: the rule it applied, why, and the values it saw."""

    time: float
    from_replicas: int
    to_replicas: int
    rule: str
    message: str
    values: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetSnapshot:
    time: float
    name: str
    model: str
    url: str
    desired: int
    autoscaling: bool
    replicas: tuple[ReplicaRow, ...]
    ttft_p95_seconds: float | None
    output_tokens_per_second: float | None
    arrival_rate: float | None
    prefix_hit_rate: float | None
    routing: dict[str, float]
    decisions: tuple[DecisionRow, ...]
    events: tuple[Event, ...]
    metrics_missing: str | None
    current: DecisionRow | None = None  # the latest evaluation, a hold included: why the count is what it is

    def count(self, phase: str) -> int:
        return sum(1 for r in self.replicas if r.phase == phase)

    @property
    def pool(self) -> int:
        """The standby pool's engines, ready (``standby``) or on their way."""
        return sum(1 for r in self.replicas if r.phase.startswith("standby"))

    @property
    def waiting(self) -> float:
        return sum(r.waiting or 0.0 for r in self.replicas if r.phase == "ready")

    @property
    def running(self) -> float:
        return sum(r.running or 0.0 for r in self.replicas if r.phase == "ready")


def _phase(replica: EngineReplica) -> str:
    """The fleet's phase; a standby pool engine still loading or restarting is ``standby (starting)``, so
    that counts of ``starting`` hold only engines the fleet is waiting for."""
    if replica.pooled and replica.phase != "standby":
        return f"standby ({replica.phase})"
    return replica.phase


def _finite(value: float | None) -> float | None:
    """A figure for the view and the JSON file: NaN or infinity (no data, really) becomes None."""
    return value if value is not None and math.isfinite(value) else None


def take(
    now: float,
    name: str,
    model: str,
    url: str,
    fleet: EngineFleet,
    autoscaling: bool,
    signals: FleetSignals,
    extras: Extras,
    decisions: tuple[DecisionRow, ...],
    current: DecisionRow | None = None,
) -> FleetSnapshot:
    """Joins the fleet's own state with what the metrics said about each replica."""
    observed = {r.name: r for r in signals.replicas}
    rows = []
    for replica in fleet.replicas:
        seen = observed.get(replica.name)
        rows.append(
            ReplicaRow(
                replica.name,
                _phase(replica),
                replica.since,
                replica.url,
                replica.process.process.pid if replica.process is not None else None,
                _finite(seen.waiting) if seen else None,
                _finite(seen.running) if seen else None,
                _finite(seen.kv_usage) if seen else None,
                replica.restarts,
                replica.error if replica.phase == "backoff" else None,
                replica.startup.phases() if replica.startup is not None else {},
            )
        )
    return FleetSnapshot(
        time=now,
        name=name,
        model=model,
        url=url,
        desired=fleet.desired,
        autoscaling=autoscaling,
        replicas=tuple(rows),
        ttft_p95_seconds=_finite(signals.ttft_p95_seconds),
        output_tokens_per_second=_finite(signals.output_tokens_per_second),
        arrival_rate=_finite(signals.arrival_rate),
        prefix_hit_rate=extras.prefix_hit_rate,
        routing=dict(extras.routing),
        decisions=decisions,
        events=tuple(fleet.events)[-10:],
        metrics_missing=signals.missing,
        current=current,
    )


def decision_row(decision: ScalingDecision, before: int) -> DecisionRow:
    values = {key: _finite(value) for key, value in decision.values.items()}
    return DecisionRow(decision.time, before, decision.replicas, decision.rule, decision.message, values)


class Timeline:
    """The last ``SAMPLES_KEPT`` snapshots, reduced to the numbers the dashboard charts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.samples: deque[dict[str, object]] = deque(maxlen=SAMPLES_KEPT)

    def add(self, snapshot: FleetSnapshot) -> None:
        self.samples.append(
            {
                "t": round(snapshot.time, 2),
                "desired": snapshot.desired,
                "ready": snapshot.count("ready"),
                "starting": snapshot.count("starting") + snapshot.count("backoff"),
                "draining": snapshot.count("draining"),
                "standby": snapshot.pool,
                "waiting": snapshot.waiting,
                "running": snapshot.running,
                "ttft_p95": snapshot.ttft_p95_seconds,
                "tokens_per_s": snapshot.output_tokens_per_second,
                "prefix_hit": snapshot.prefix_hit_rate,
                "routing": snapshot.routing,
            }
        )

    def write(self, snapshot: FleetSnapshot) -> None:
        """The latest snapshot in full plus every sample, replacing the file in one step."""
        document = {"snapshot": asdict(snapshot), "samples": list(self.samples)}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, allow_nan=False, default=str))
        os.replace(temporary, self.path)
