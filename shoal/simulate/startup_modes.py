"""How a simulated replica starts: cold, from the node's cache, or promoted from a standby pool.

- ``cold``: the image is pulled, the weights fetched, loaded and warmed up; the time is drawn from the profile's
  ``startup_s`` range (what a fresh node costs).
- ``cached``: image and weights are on the node already (``weights from the node cache``): load and warm-up only,
  drawn from ``CACHED_FRACTION`` of the profile's range.
- ``standby``: ``standby`` replicas are kept started, loaded and warmed but not routed; a scale-up takes one and
  it is ready ``promote_s`` later (readiness seen and the gateway told); the pool is refilled at once by a cold
  start. Standby replicas are counted in replica-hours (and on their own, as ``standby_hours``): the GPU is
  held all along. When the pool is empty (all taken and still refilling) a scale-up waits for the first refill.

The law of the trade-off: a standby pool of ``k`` buys ``k`` scale-ups of ``promote_s`` instead of a cold start,
for ``k`` replicas' hours for the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MODES = ("cold", "cached", "standby")
CACHED_FRACTION = 0.2  # load + warm-up of a cold start when the profile says nothing else: 12-60 s of 60-300 s
PROMOTE_S = 2.0  # a loaded replica made routable: readiness probe and discovery (measured here: under 1 s)


@dataclass(frozen=True)
class StartupMode:
    mode: Literal["cold", "cached", "standby"] = "cold"
    standby: int = 0
    promote_s: float = PROMOTE_S

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--startup-mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.standby < 0:
            raise ValueError(f"--standby must be >= 0, got {self.standby}")
        if self.mode == "standby" and self.standby == 0:
            raise ValueError("--startup-mode standby needs --standby N (N >= 1)")
        if self.mode != "standby" and self.standby:
            raise ValueError(f"--standby {self.standby} needs --startup-mode standby")
        if self.promote_s < 0:
            raise ValueError(f"the standby promotion time must be >= 0, got {self.promote_s}")

    def start_range(self, cold: tuple[float, float]) -> tuple[float, float]:
        """The range a started replica's time to ready is drawn from (a standby's refill starts cold)."""
        if self.mode != "cached":
            return cold
        return cold[0] * CACHED_FRACTION, cold[1] * CACHED_FRACTION

    def check_against(self, max_replicas: int) -> None:
        """A pool above ``replicas.max`` would hold more replicas idle than the fleet may ever serve with."""
        if self.standby > max_replicas:
            raise ValueError(f"--standby {self.standby} is above the most replicas ({max_replicas})")

    def label(self) -> str:
        return f"standby {self.standby}" if self.mode == "standby" else self.mode


COLD = StartupMode()
