"""What the autoscaler observes: one snapshot of a fleet, gathered at the edge (Prometheus, a direct scrape of
each engine's ``/metrics``, the simulator) and handed to a pure policy.

Times are seconds on the caller's clock (``time.time()`` in production, simulated seconds in the simulator);
policies never read a clock, they read ``FleetSignals.time``. A value the source could not get is ``None``,
never a made-up zero, so a policy can tell "no load" from "no data".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ReplicaPhase = Literal["starting", "ready", "draining"]


@dataclass(frozen=True)
class ReplicaSignals:
    """One engine replica as the source saw it; ``max_num_seqs`` is its batch limit (None from an engine that does
    not export it), so ``running / max_num_seqs`` is how full its batch is."""

    name: str
    phase: ReplicaPhase
    since: float
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    max_num_seqs: float | None = None


@dataclass(frozen=True)
class FleetSignals:
    """One observation of the whole fleet of one InferenceDeployment.

    ``desired`` is the replica count last applied (pods not created yet are in it but not in ``replicas``);
    ``held_requests`` are requests the gateway holds because no replica is ready (scale from zero);
    ``missing`` says why the source could not observe the fleet (stale, down, NaN), None when it could.
    ``ttft_p90_seconds`` and ``tpot_p90_seconds`` (time per output token after the first: per finished request in
    the simulator, the engines' inter-token latency histogram from the sources) are what the peers' SLO laws read
    (llm-d's SLO-aware scaler, Dynamo's planner); Shoal's policy does not, the operator checks the engines'
    termination grace against the latter (:mod:`shoal.operator.termination`).
    """

    time: float
    desired: int
    replicas: tuple[ReplicaSignals, ...] = ()
    ttft_p95_seconds: float | None = None
    ttft_p90_seconds: float | None = None
    tpot_p90_seconds: float | None = None
    arrival_rate: float | None = None
    output_tokens_per_second: float | None = None
    held_requests: int = 0
    missing: str | None = None
    alert_firing: bool = False
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> tuple[ReplicaSignals, ...]:
        return tuple(r for r in self.replicas if r.phase == "ready")

    @property
    def starting(self) -> tuple[ReplicaSignals, ...]:
        return tuple(r for r in self.replicas if r.phase == "starting")
