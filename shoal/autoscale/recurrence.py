"""When a remembered burst is due again, learned from the times it came back, so the fleet is not kept between.

Burst memory keeps the size a burst needed for ``burst_memory_seconds`` so that a recurring burst finds its
replicas ready instead of waiting a start-up for them. Kept the whole time between bursts, that size costs the
replica-hours of every gap. Once the burst has come back, the gap is known: from the burst's last two onsets the
next is due one interval after the last. Between bursts the memory can then sleep (the fleet sized by today's
load, scaled down as usual) and wake ``lead`` seconds before the due time (:func:`wake_lead`: the longest
start-up seen plus a quarter of the interval), so the replicas are ready when the burst returns. One interval is
all the evidence there is, and real recurrences drift, the more the longer their interval: a burst every 20 to 30
minutes comes back up to 10 minutes off the last interval's guess, so the margin is a share of the interval, not
a fixed time. A burst that is not back by its due time plus ``slack`` ends the schedule and the memory is
kept whole again, as before the recurrence was seen.

An onset is the burst's leading edge: the demand rising over ``QUIET_SHARE`` of the burst's demand after at
least ``QUIET_S`` under it. A burst that was less than ``1 / QUIET_SHARE`` times the load around it leaves no
quiet between its returns, so no recurrence is learned from it and its memory is kept whole: noise around a
small burst must not pass for its return. No clock, no I/O: times and demands come from the policy.
"""

from __future__ import annotations

from dataclasses import dataclass

# under this share of the burst's demand for QUIET_S, and the burst is over: its next rise over it is an onset
QUIET_SHARE = 0.6
QUIET_S = 120.0
# the fewest seconds between two onsets taken for a recurrence (closer, they are one burst that dipped)
MIN_PERIOD_S = 300.0
# a due burst's replicas are asked for this share of its interval (at least WAKE_MARGIN_S) plus the longest
# start-up before it is due
WAKE_SHARE = 0.25
WAKE_MARGIN_S = 60.0


def wake_lead(period: float, longest_startup: float) -> float:
    """Seconds before a burst is due that its replicas are asked for: they must be ready by its earliest likely
    return, and one interval's guess of the next is off by a share of the interval, not by a fixed time."""
    return longest_startup + max(WAKE_MARGIN_S, WAKE_SHARE * period)


@dataclass(frozen=True)
class Schedule:
    """The recurrence as last seen: ``period`` seconds between onsets, the next ``due`` at that time."""

    period: float
    due: float


class BurstRecurrence:
    """The last two onsets of the remembered burst and whether it is over (under the quiet level for ``QUIET_S``)."""

    __slots__ = ("_below_since", "_onsets")

    def __init__(self) -> None:
        self._onsets: list[float] = []
        self._below_since: float | None = None

    def start(self, onset: float) -> None:
        """A new burst is remembered, which began at ``onset``: the first onset of a possible recurrence."""
        self._onsets, self._below_since = [onset], None

    def drop_schedule(self) -> None:
        """The burst missed its due time: keep its last onset, not the interval that predicted it."""
        self._onsets = self._onsets[-1:]

    def observe(self, now: float, demand: float, burst_demand: float) -> None:
        """One observation of the demand; a rise over the quiet level after ``QUIET_S`` under it is an onset."""
        if not self._onsets:
            return
        if demand <= QUIET_SHARE * burst_demand:
            if self._below_since is None:
                self._below_since = now
            return
        if self.over(now) and now - self._onsets[-1] >= MIN_PERIOD_S:
            self._onsets = [self._onsets[-1], now]
        self._below_since = None

    def schedule(self) -> Schedule | None:
        """The period and the next due time, from the last two onsets (None before the burst has come back)."""
        if len(self._onsets) < 2:
            return None
        period = self._onsets[1] - self._onsets[0]
        return Schedule(period, self._onsets[1] + period)

    def over(self, now: float) -> bool:
        """The burst has been under the quiet level for ``QUIET_S``: the fleet may shrink until the next is due."""
        return self._below_since is not None and now - self._below_since >= QUIET_S

    def asleep(self, now: float, lead: float) -> bool:
        """Memory not needed now: the last burst is over and the next is due more than ``lead`` seconds away."""
        schedule = self.schedule()
        return schedule is not None and self.over(now) and now < schedule.due - lead

    def missed(self, now: float, slack: float) -> bool:
        """The burst is ``slack`` seconds past its due time and has not come back: the schedule was wrong."""
        schedule = self.schedule()
        return schedule is not None and self.over(now) and now > schedule.due + slack
