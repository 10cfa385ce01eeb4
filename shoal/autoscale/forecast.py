"""The arrival rate one replica start-up ahead, forecast from the policy's own history (the predictive floor).

The method, an additive seasonal decomposition kept small and bounded::

    forecast(t + h) = seasonal(t + h) + residual line(t + h)

- ``seasonal``: the season (a day by default: the time of day on the caller's clock) is cut into bins of
  ``max(60 s, season / 144)``; each bin holds the mean rate observed in it, folded across seasons by an
  exponential average (the newest season weighs ``SEASON_WEIGHT``), so a shape that drifts is followed within a
  few seasons. A bin never observed takes the nearest observed one before it.
- ``residual line``: the least-squares line through what the seasonal shape did not explain (observed minus
  seasonal) over the last ``TREND_WINDOW_S``, evaluated at ``t + h``: today's level against the usual day, and
  its trend (AIBrix's projection, on the residual instead of the raw rate). A residual is taken when its sample
  arrives, against the seasons before (its own bin is not folded yet), and only where the shape has seen that
  bin in an earlier season.

No forecast before the history spans one whole season: a shape half learned would forecast half a day as the
other half. A negative forecast is 0. State is a few arrays of ``bins`` floats and one window of samples; no
clock, no I/O, numpy only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from shoal.autoscale.trend import fit_line

BINS_PER_SEASON = 144
MIN_BIN_S = 60.0
SEASON_WEIGHT = 0.5
TREND_WINDOW_S = 600.0


def trend_projection(samples: list[tuple[float, float]], at: float) -> float:
    """The least-squares line through ``(time, value)`` samples, evaluated at ``at`` (the mean for one sample)."""
    return fit_line(samples).at(at)


@dataclass(frozen=True)
class Forecast:
    """The rate expected at ``at`` (requests/s) and its two parts."""

    at: float
    rate: float
    seasonal: float
    residual: float


class ArrivalForecast:
    """Seasonal shape plus residual trend over the arrival rates one policy observes (module docstring)."""

    __slots__ = ("_bin", "_first", "_means", "_recent", "_seen", "bin_s", "season_s")

    def __init__(self, season_s: float) -> None:
        if not season_s > 0:
            raise ValueError(f"season_s must be > 0, got {season_s}")
        self.season_s = season_s
        self.bin_s = max(MIN_BIN_S, season_s / BINS_PER_SEASON)
        bins = max(1, math.ceil(season_s / self.bin_s))
        self._means = np.zeros(bins)
        self._seen = np.zeros(bins, dtype=bool)
        self._bin: tuple[int, int, float, int] | None = None  # (season number, bin, sum, count) being filled
        self._first: float | None = None
        self._recent: deque[tuple[float, float]] = deque()  # (time, residual) over the trend window

    def _index(self, time: float) -> int:
        return int((time % self.season_s) // self.bin_s) % len(self._means)

    def observe(self, now: float, rate: float | None) -> None:
        """Adds one observed arrival rate (None: the source could not say, nothing is learned)."""
        if rate is None or not math.isfinite(rate):
            return
        if self._first is None:
            self._first = now
        season, index = math.floor(now / self.season_s), self._index(now)
        if self._bin is not None and self._bin[:2] != (season, index):
            self._fold()
        total, count = (0.0, 0) if self._bin is None else self._bin[2:]
        self._bin = (season, index, total + rate, count + 1)
        if self._seen[self._index(now)]:
            self._recent.append((now, rate - self.seasonal(now)))
        while self._recent and self._recent[0][0] <= now - TREND_WINDOW_S:
            self._recent.popleft()

    def _fold(self) -> None:
        """The bin just completed joins the seasonal shape."""
        assert self._bin is not None
        _, index, total, count = self._bin
        mean = total / count
        seen = self._seen[index]
        self._means[index] = SEASON_WEIGHT * mean + (1 - SEASON_WEIGHT) * self._means[index] if seen else mean
        self._seen[index] = True
        self._bin = None

    def history_s(self, now: float) -> float:
        """Seconds of history behind a forecast made at ``now``."""
        return 0.0 if self._first is None else now - self._first

    def seasonal(self, time: float) -> float:
        """The learned shape's rate at ``time`` (0 before any bin completed)."""
        index = self._index(time)
        for back in range(len(self._means)):
            i = (index - back) % len(self._means)
            if self._seen[i]:
                return float(self._means[i])
        return 0.0

    def predict(self, now: float, ahead_s: float) -> Forecast | None:
        """The rate expected ``ahead_s`` after ``now``, None with less than one season of history."""
        if self.history_s(now) < self.season_s:
            return None
        at = now + ahead_s
        seasonal = self.seasonal(at)
        residual = trend_projection(list(self._recent), at) if self._recent else 0.0
        return Forecast(at, max(0.0, seasonal + residual), seasonal, residual)
