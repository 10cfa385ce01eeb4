"""The arrival rate's trend, projected one replica start-up ahead, trusted only where the rate climbs as a line.

A reactive fleet sized at ``target_utilization`` falls behind a steady climb: each replica it asks for serves only
after loading (60-300 s on a GPU), by when the load has risen past the headroom. Projecting the recent trend one
start-up ahead (AIBrix's least-squares projection) asks for it in time. A projection is only as good as the line
it extends, so this one is trusted only where a line explains the rate:

- **Bins, not ticks.** Samples are averaged into ``BIN_S`` bins (a minute) so that rates over overlapping windows
  (the Prometheus source's 1-minute ``rate()`` read every 10 s) do not pass for evidence many times over; the
  bin still filling is left out.
- **A line, not a step.** The window's older and newer halves must each climb at least ``AGREEMENT`` of the
  whole window's slope. A step (flat, then higher) fits a rising line too, but each half of it is flat: a step
  is the panic rules' business, and its slope extended would count it twice. A climb that is levelling off
  (the top of a day) fails the same test, so it is not projected past its peak.
- **Only the part the data proves.** The slope used is its lower confidence bound (``slope - Z * standard
  error``), and only when that is positive: noise around a constant rate projects nothing, and a climb projects
  what it has surely climbed.

The same tests mirrored say when the rate **falls** as a line (:meth:`ArrivalTrend.falling`: the slope's upper
confidence bound under zero, both halves falling): the policy then shortens its scale-down window, which is there
to ride out noise around a level, not a fall ten minutes of rates prove.

No clock, no I/O: samples and time come from the caller.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

WINDOW_S = 600.0
BIN_S = 60.0
MIN_BINS = 6
AGREEMENT = 0.5
Z = 2.0


@dataclass(frozen=True)
class Line:
    """A least-squares line: ``mean_v + slope * (t - mean_t)``; ``slope_se`` the slope's standard error (inf with
    fewer than 3 points)."""

    mean_t: float
    mean_v: float
    slope: float
    slope_se: float

    def at(self, t: float, slope: float | None = None) -> float:
        return self.mean_v + (self.slope if slope is None else slope) * (t - self.mean_t)


def fit_line(samples: list[tuple[float, float]]) -> Line:
    """The least-squares line through ``(time, value)`` samples (a flat line at the mean for one sample)."""
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return Line(mean_t, mean_v, 0.0, math.inf)
    slope = sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread
    if n < 3:
        return Line(mean_t, mean_v, slope, math.inf)
    squares = sum((v - (mean_v + slope * (t - mean_t))) ** 2 for t, v in samples)
    return Line(mean_t, mean_v, slope, math.sqrt(squares / (n - 2) / spread))


@dataclass(frozen=True)
class TrendProjection:
    """The rate expected ``ahead_s`` from now on the trusted slope (``slope_floor``, the lower bound)."""

    rate: float
    slope: float
    slope_floor: float
    halves: tuple[float, float]  # the older and the newer half's slopes
    span_s: float  # the history the line was fitted to
    ahead_s: float


class ArrivalTrend:
    """The arrival rate over the last ``WINDOW_S`` in ``BIN_S`` means, and its projection (module docstring)."""

    __slots__ = ("_bin", "_bins")

    def __init__(self) -> None:
        self._bins: deque[tuple[float, float]] = deque()  # (bin middle, mean rate) of completed bins
        self._bin: tuple[int, float, int] | None = None  # (bin number, sum, count) being filled

    def observe(self, now: float, rate: float | None) -> None:
        """Adds one observed arrival rate (None: the source could not say, nothing is learned)."""
        if rate is None or not math.isfinite(rate):
            return
        number = math.floor(now / BIN_S)
        if self._bin is not None and self._bin[0] != number:
            done, total, count = self._bin
            self._bins.append(((done + 0.5) * BIN_S, total / count))
            self._bin = None
        while self._bins and self._bins[0][0] < now - WINDOW_S:
            self._bins.popleft()
        total, count = (0.0, 0) if self._bin is None else self._bin[1:]
        self._bin = (number, total + rate, count + 1)

    def project(self, now: float, ahead_s: float) -> TrendProjection | None:
        """The rate ``ahead_s`` after ``now`` on the trusted slope, None without a trusted rising trend."""
        trusted = self._trusted(rising=True)
        if trusted is None:
            return None
        line, floor, halves = trusted
        return TrendProjection(
            line.at(now + ahead_s, floor), line.slope, floor, halves, len(self._bins) * BIN_S, ahead_s
        )

    def falling(self) -> float | None:
        """The slope's upper bound (req/s per second, negative) when the rate falls as a line over the window by the
        same tests a climb passes (both halves falling, the bound under zero); None otherwise."""
        trusted = self._trusted(rising=False)
        return None if trusted is None else trusted[1]

    def _trusted(self, rising: bool) -> tuple[Line, float, tuple[float, float]] | None:
        """The window's line, the confidence bound of its slope nearer zero, and its halves' slopes, when the rate
        moves that way as a line (module docstring); None otherwise."""
        if len(self._bins) < MIN_BINS:
            return None
        bins = list(self._bins)
        line = fit_line(bins)
        sign = 1.0 if rising else -1.0
        bound = sign * line.slope - Z * line.slope_se
        if bound <= 0:
            return None
        half = len(bins) // 2
        halves = (fit_line(bins[:half]).slope, fit_line(bins[-half:]).slope)
        if min(sign * slope for slope in halves) < AGREEMENT * sign * line.slope:
            return None
        return line, sign * bound, halves
