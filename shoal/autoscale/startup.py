"""How long a replica takes here from asked for to serving, learned from the fleet's own replicas.

A replica asked for now works nothing off until it has loaded: 60-300 s for a GPU model (vLLM users report
minutes), seconds for a small model on a laptop. The policy sizes a queue that piled up to be worked off over
that time, so it reads the time off what it sees: a replica seen starting since ``t0`` and later seen ready
since ``t1`` took ``t1 - t0``. Only a first start counts: a replica that served and turns unready again (a
container restart, a failing readiness probe) is reported starting since its pod's creation, and its way back
to ready is not a start-up. Pure state over the signals the policy already gets; no clock, no I/O.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable

from shoal.autoscale.signals import ReplicaSignals


class StartupTimes:
    """The last ``keep`` start-ups seen (start to ready, in seconds) and their median."""

    __slots__ = ("_seen", "_served", "_starting")

    def __init__(self, keep: int = 16) -> None:
        self._starting: dict[str, float] = {}  # replica name -> since when it was last seen on its first start
        self._served: set[str] = set()  # replicas seen ready, as long as they are reported
        self._seen: deque[float] = deque(maxlen=keep)

    def observe(self, replicas: Iterable[ReplicaSignals]) -> None:
        """Records each replica seen on its first start before and ready now; forgets replicas gone."""
        starting: dict[str, float] = {}
        served: set[str] = set()
        for replica in replicas:
            name = replica.name
            if name in self._served or replica.phase == "ready":
                served.add(name)
            if replica.phase == "starting" and name not in self._served:
                starting[name] = replica.since
            elif replica.phase == "ready" and name in self._starting:
                self._seen.append(max(replica.since - self._starting[name], 0.0))
        self._starting, self._served = starting, served

    @property
    def typical(self) -> float | None:
        """The median start-up seen (robust to one slow image pull), None before any replica has started."""
        return statistics.median(self._seen) if self._seen else None

    @property
    def longest(self) -> float | None:
        """The longest start-up kept: how early a replica must be asked for to be ready by a known time."""
        return max(self._seen) if self._seen else None
