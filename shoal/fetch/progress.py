"""Progress as plain lines, at most one per ``interval_s`` (no bars: these end up in pod logs).

The clock is injected, so what is printed when is a pure function of the bytes counted and the times given.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Report = Callable[[str], None]


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


class Progress:
    """Counts the bytes fetched of ``total`` and reports them through ``report`` now and then."""

    def __init__(
        self,
        label: str,
        total: int,
        report: Report,
        interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.report, self.interval_s, self.clock = label, total, report, interval_s, clock
        self.done = 0
        self.fetched = 0  # bytes that came over the network this time (resumed parts count in ``done`` only)
        self.started = self._last = clock()

    def skip(self, size: int) -> None:
        """Bytes already on disk from an earlier, interrupted fetch."""
        self.done += size

    def advance(self, size: int) -> None:
        self.done += size
        self.fetched += size
        now = self.clock()
        if now - self._last >= self.interval_s:
            self._last = now
            self.report(self.line(now))

    def line(self, now: float) -> str:
        rate = self.fetched / max(now - self.started, 1e-9)
        percent = 100.0 * self.done / self.total if self.total else 100.0
        return f"{self.label}: {percent:.0f}% ({human(self.done)} of {human(self.total)}, {human(rate)}/s)"

    def finish(self) -> str:
        now = self.clock()
        return f"{self.label}: fetched {human(self.fetched)} in {now - self.started:.1f} s"
