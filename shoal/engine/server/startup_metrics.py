"""How this engine process started, as Prometheus series: each phase's seconds and the moments it turned ready
and served its first token.

``shoal_engine_startup_seconds{phase}`` times the process from its start (as ``/proc`` has it): ``imports``
(to the server's ``main``), ``planning`` (to the load: model resolved, hardware planned, port open),
``loading`` (weights read, converted and placed), ``profiling`` (a GPU's memory measurement), ``warming`` (the
forwards before ``/ready``) and ``other`` (the rest: tokenizer, KV cache), so they add up to the process's age
at ready; ``shoal_engine_ready_time_seconds`` and ``shoal_engine_first_token_time_seconds`` are Unix times.
``shoal up`` and ``bench/startup.py`` join them with the scale decision, the spawn and the gateway's listing; on
a cluster the operator (or a PromQL query) can read them from the same page.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "shoal_engine"


def process_age(pid: int | str = "self") -> float:
    """Seconds since process ``pid`` started, to the clock tick (10 ms): ``/proc``'s start in ticks since boot
    against the boot clock. Not ``process_start_time_seconds``: its boot time is in whole seconds."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


class StartupCollector(Collector):
    """The phases and moments recorded so far; a series appears once its phase is done."""

    def __init__(self, model: str) -> None:
        self._model = model
        self.phases: dict[str, float] = {}
        self._mark = time.time()
        self.ready_time: float | None = None
        self.first_token_time: float | None = None

    def imports_done(self, at: float) -> None:
        """``at``: when the server's ``main`` began; process start to then is the interpreter and imports."""
        self._mark = at
        self.phases["imports"] = max(process_age() - (time.time() - at), 0.0)

    def loading_starts(self) -> None:
        """The engine begins to load: since ``imports_done`` is planning."""
        self.phases["planning"] = time.time() - self._mark

    def ready(self, phases: dict[str, float]) -> None:
        """The engine's own phases (loading, profiling, warming), the rest as ``other``, and now as ready."""
        self.phases.update(phases)
        self.phases["other"] = max(process_age() - sum(self.phases.values()), 0.0)
        self.ready_time = time.time()

    def first_token(self, when: float) -> None:
        if self.first_token_time is None:
            self.first_token_time = when

    def collect(self) -> Iterator[Metric]:
        if self.phases:
            family = GaugeMetricFamily(
                f"{PREFIX}_startup_seconds",
                "Seconds each start-up phase of this process took.",
                labels=["model", "phase"],
            )
            for phase, seconds in self.phases.items():
                family.add_metric([self._model, phase], seconds)
            yield family
        for name, doc, value in (
            ("ready_time_seconds", "When the engine turned ready (Unix time).", self.ready_time),
            ("first_token_time_seconds", "When the engine served its first token (Unix time).", self.first_token_time),
        ):
            if value is not None:
                gauge = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["model"])
                gauge.add_metric([self._model], value)
                yield gauge
