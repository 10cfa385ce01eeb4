"""What every metrics source offers: turn the replicas the orchestrator knows into one :class:`FleetSignals`.

The orchestrator (the operator's pod list, ``shoal up``'s process table) knows which replicas exist, where they
listen and whether they are still loading; a source adds what the engines report. Sources never raise for a
failure of what they observe: an unreachable, slow or nonsensical source becomes ``missing`` (nothing could be
seen) or None values on the replicas it could not read, so the policy holds instead of acting on made-up zeros.
Held requests (the gateway) and firing alerts (Alertmanager) are not the engines' to report: the caller sets
them with ``dataclasses.replace``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from shoal.autoscale.signals import FleetSignals, ReplicaPhase


@dataclass(frozen=True)
class ReplicaTarget:
    """One replica as the orchestrator knows it: ``name`` (the pod's name, the ``pod`` label in Prometheus),
    its phase since ``since``, and for a direct scrape the engine's base ``url``."""

    name: str
    phase: ReplicaPhase
    since: float
    url: str | None = None


class MetricsSource(Protocol):
    async def observe(self, now: float, desired: int, replicas: Sequence[ReplicaTarget]) -> FleetSignals:
        """One observation at ``now`` (the caller's clock) of the fleet whose last applied count is ``desired``."""
        ...
