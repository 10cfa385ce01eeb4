"""One new replica's way from the scale decision to its first served token, by phase.

The fleet knows three moments itself: the decision that raised the count, the engine's spawn, and when it listed
the ready engine in the backends file the gateway follows. The engine knows the rest and publishes it on its
``/metrics`` page (:mod:`shoal.engine.server.startup_metrics`): the seconds of each of its own phases from its
process's start, when it turned ready, and when it served its first token. :func:`read_engine_startup` reads that page;
:class:`StartupRecord` joins the two into contiguous phases:

``spawn`` (decision to process start), ``imports``, ``planning``, ``loading``, ``profiling``, ``warming``, ``other``
(the engine's untimed steps: tokenizer, KV cache; the engine's phases add up to its age at ready), ``listed`` (engine ready to the fleet seeing it and listing it),
``routed`` (listed to the first token it served: the gateway's discovery, then the first request routed to it).
A phase not known yet (or from an engine kind that does not publish it) is missing, never guessed. A replica
promoted from the standby pool (``autoscaling.standby``) was loaded before the decision: its way is ``promote``
(decision to listed), then ``routed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from shoal.protocol.prom_text import samples_named

ENGINE_PHASES = ("imports", "planning", "loading", "profiling", "warming", "other")


@dataclass(frozen=True)
class EngineStartup:
    """What an engine's ``/metrics`` says of its own start."""

    phases: dict[str, float] = field(default_factory=dict)
    ready: float | None = None
    first_token: float | None = None


def parse_engine_startup(page: str) -> EngineStartup:
    """The start-up series of one engine's ``/metrics`` page (any that are absent stay None)."""

    def one(name: str) -> float | None:
        values = [value for _, value in samples_named(page, name)]
        return values[0] if values else None

    phases = {labels.get("phase", "?"): v for labels, v in samples_named(page, "shoal_engine_startup_seconds")}
    return EngineStartup(
        phases,
        one("shoal_engine_ready_time_seconds"),
        one("shoal_engine_first_token_time_seconds"),
    )


async def read_engine_startup(client: httpx.AsyncClient, url: str) -> EngineStartup | None:
    """One scrape of ``url``'s ``/metrics``; None when it does not answer."""
    try:
        response = await client.get(url + "/metrics", timeout=2.0)
    except httpx.HTTPError:
        return None
    return parse_engine_startup(response.text) if response.status_code == 200 else None


@dataclass
class StartupRecord:
    """The fleet's moments for one replica's first start, and the engine's own once read."""

    decided: float
    spawned: float | None = None
    listed: float | None = None
    engine: EngineStartup = field(default_factory=EngineStartup)
    promoted: bool = False  # taken from the standby pool: loaded before the decision, only listed after it

    @property
    def complete(self) -> bool:
        return self.engine.first_token is not None

    def phases(self) -> dict[str, float]:
        """Seconds per phase, in order, as far as known; they add up to decision -> first token once complete."""
        engine = self.engine
        if self.promoted:
            return self._promotion()
        if engine.ready is None or not engine.phases:
            return {}
        timed = {phase: engine.phases[phase] for phase in ENGINE_PHASES if engine.phases.get(phase, 0.0) >= 0.005}
        out = {"spawn": engine.ready - sum(engine.phases.values()) - self.decided, **timed}
        if self.listed is not None:
            out["listed"] = self.listed - engine.ready
            if engine.first_token is not None:
                out["routed"] = engine.first_token - self.listed
        return {phase: max(seconds, 0.0) for phase, seconds in out.items()}

    def _promotion(self) -> dict[str, float]:
        """A standby engine's way: ``promote`` (decision to listed), then ``routed`` (listed to first token)."""
        if self.listed is None:
            return {}
        out = {"promote": self.listed - self.decided}
        if self.engine.first_token is not None:
            out["routed"] = self.engine.first_token - self.listed
        return {phase: max(seconds, 0.0) for phase, seconds in out.items()}

    def summary(self) -> str:
        """``decision -> first token 9.8 s: spawn 0.10 s, imports 2.00 s, ...`` (``-> listed`` until then)."""
        phases = self.phases()
        if not phases:
            return "start-up phases not published by this engine"
        listed = "listed" in phases or "promote" in phases
        end = "first token" if "routed" in phases else "listed" if listed else "ready"
        parts = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items())
        return f"decision -> {end} {sum(phases.values()):.1f} s: {parts}"
