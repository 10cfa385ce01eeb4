"""A remembered burst that comes back is not kept between its returns, and is ready again before the next."""

from __future__ import annotations

from fleets import FluidFleet
from hypothesis import given
from hypothesis import strategies as st

from shoal.autoscale import AutoscalingConfig, ShoalPolicy
from shoal.autoscale.recurrence import (
    MIN_PERIOD_S,
    QUIET_S,
    QUIET_SHARE,
    WAKE_MARGIN_S,
    WAKE_SHARE,
    BurstRecurrence,
    wake_lead,
)

BURST = 12.0  # req/s at the burst, 4 around it, 2 req/s per replica: 6 replicas at the burst, 2 between


def _fed(recurrence: BurstRecurrence, demand: float, start: int, end: int) -> None:
    for t in range(start, end, 10):
        recurrence.observe(float(t), demand, BURST)


def test_a_return_after_a_quiet_gap_gives_the_period_and_the_next_due_time() -> None:
    recurrence = BurstRecurrence()
    recurrence.start(900.0)
    _fed(recurrence, BURST, 900, 1200)
    _fed(recurrence, 4.0, 1200, 2400)
    assert recurrence.schedule() is None  # one burst: nothing to tell a recurring one from a one-off crowd
    _fed(recurrence, BURST, 2400, 2700)
    schedule = recurrence.schedule()
    assert schedule is not None and (schedule.period, schedule.due) == (1500.0, 3900.0)
    assert not recurrence.over(2700.0)  # still at the burst
    _fed(recurrence, 4.0, 2700, 3500)
    assert recurrence.over(3490.0)
    assert recurrence.asleep(3490.0, lead=300.0)  # the next is due in 410 s, more than the lead away
    assert not recurrence.asleep(3610.0, lead=300.0)  # within the lead of its due time: the memory is needed
    assert not recurrence.missed(4100.0, slack=300.0)
    assert recurrence.missed(4210.0, slack=300.0)
    recurrence.drop_schedule()
    assert recurrence.schedule() is None and not recurrence.asleep(4210.0, lead=300.0)


def test_dips_within_a_burst_and_noise_around_a_small_one_are_no_returns() -> None:
    recurrence = BurstRecurrence()
    recurrence.start(0.0)
    # a dip under the quiet level shorter than QUIET_S, in the middle of the burst
    _fed(recurrence, BURST, 0, 400)
    _fed(recurrence, 4.0, 400, 400 + int(QUIET_S) - 10)
    _fed(recurrence, BURST, 500, 700)
    assert recurrence.schedule() is None
    # load that never falls under the quiet level between two peaks: no quiet, no onset
    _fed(recurrence, QUIET_SHARE * BURST + 0.5, 700, 2000)
    _fed(recurrence, BURST, 2000, 2100)
    assert recurrence.schedule() is None
    # a return sooner than MIN_PERIOD_S after the last onset is the same burst
    fresh = BurstRecurrence()
    fresh.start(0.0)
    _fed(fresh, 4.0, 10, int(MIN_PERIOD_S) - 10)
    _fed(fresh, BURST, int(MIN_PERIOD_S) - 10, int(MIN_PERIOD_S) + 100)
    assert fresh.schedule() is None


@given(
    st.lists(st.tuples(st.integers(1, 200), st.floats(0.0, 2.0 * BURST)), min_size=1, max_size=120),
    st.floats(30.0, 600.0),
)
def test_the_schedule_is_never_shorter_than_its_floor_and_sleep_never_meets_the_burst(
    steps: list[tuple[int, float]], lead: float
) -> None:
    recurrence = BurstRecurrence()
    recurrence.start(0.0)
    now = 0.0
    for gap, demand in steps:
        now += gap
        recurrence.observe(now, demand, BURST)
        schedule = recurrence.schedule()
        if schedule is not None:
            assert schedule.period >= MIN_PERIOD_S
            assert schedule.due - schedule.period <= now  # one period after the last onset, which has passed
        if recurrence.asleep(now, lead):
            assert demand <= QUIET_SHARE * BURST  # asleep only while the burst is over
            assert schedule is not None and now < schedule.due - lead
            assert not recurrence.missed(now, 0.0)


def _bursts(*starts: float) -> object:
    def rate(t: float) -> float:
        return BURST if any(start <= t < start + 300.0 for start in starts) else 4.0

    return rate


def test_the_fleet_shrinks_between_returns_and_is_ready_before_the_next() -> None:
    config = AutoscalingConfig(min_replicas=1, max_replicas=20)
    fleet = FluidFleet(capacity=2.0, startup=240.0, seed=3)
    counts = fleet.run(ShoalPolicy(config), _bursts(900.0, 2400.0, 3900.0), 5000)
    # the first gap: one burst seen, kept whole (it may recur; nothing says when)
    assert min(counts[1300:2400]) >= 6
    # after the second, the gap is known: the fleet is sized by the load until the third is due
    asleep = [d for d in fleet.decisions if 2700 <= d.time < 3500 and d.rule == "ScaleDown"]
    assert asleep and "not kept until" in asleep[-1].message, [d.message for d in asleep]
    assert max(counts[3010:3280]) <= 4
    due = [d for d in fleet.decisions if d.rule == "ScaleUpBurstDue"]
    woken = 3900 - wake_lead(1500.0, 240.0)  # a quarter of the interval plus the start-up before it is due
    assert due and woken - 30 <= due[0].time <= woken + 30, [d.time for d in due]
    assert due[0].values["burst_wake_lead_seconds"] == wake_lead(due[0].values["burst_period_seconds"], 240.0)
    assert due[0].values["burst_period_seconds"] is not None
    assert abs(due[0].values["burst_period_seconds"] - 1500.0) <= 30.0
    # ready when the burst comes: no breach answered during the third burst
    assert not [d for d in fleet.decisions if 3900 <= d.time < 4200 and d.rule.startswith("ScaleUp")]


def test_a_burst_back_a_fifth_of_its_interval_early_finds_its_replicas_ready() -> None:
    """Recurrences drift: the third burst comes 300 s, a fifth of its 1,500 s interval, before it is due. Woken a
    fixed minute plus a start-up ahead, its replicas were asked for at its return and it queued a start-up long."""
    config = AutoscalingConfig(min_replicas=1, max_replicas=20)
    fleet = FluidFleet(capacity=2.0, startup=240.0, seed=3)
    counts = fleet.run(ShoalPolicy(config), _bursts(900.0, 2400.0, 3600.0), 5000)
    due = [d for d in fleet.decisions if d.rule == "ScaleUpBurstDue"]
    assert due and due[0].time <= 3600 - 240, [d.time for d in due]
    assert min(counts[3600:3900]) >= 6
    assert not [d for d in fleet.decisions if 3600 <= d.time < 3900 and d.rule.startswith("ScaleUp")]


@given(st.floats(MIN_PERIOD_S, 86400.0), st.floats(MIN_PERIOD_S, 86400.0), st.floats(0.0, 1800.0))
def test_the_wake_lead_grows_with_the_interval_and_covers_a_start_up_and_a_minute(
    period: float, other: float, startup: float
) -> None:
    lead = wake_lead(period, startup)
    assert lead >= startup + WAKE_MARGIN_S
    assert lead >= startup + WAKE_SHARE * period
    if other > period:
        assert wake_lead(other, startup) >= lead


def test_a_burst_that_misses_its_due_time_ends_the_schedule_and_the_memory_is_kept_again() -> None:
    config = AutoscalingConfig(min_replicas=1, max_replicas=20)
    fleet = FluidFleet(capacity=2.0, startup=240.0, seed=3)
    counts = fleet.run(ShoalPolicy(config), _bursts(900.0, 2400.0), 5200)
    due = [d for d in fleet.decisions if d.rule == "ScaleUpBurstDue"]
    assert due and due[0].time < 3900
    # past the due time plus the slack (the wake lead) the schedule is gone from every decision ...
    late = [d for d in fleet.decisions if d.time > 3900 + wake_lead(1500.0, 240.0) + 20]
    assert all(d.values.get("burst_period_seconds") is None for d in late)
    # ... the kept size holds (no sleep without a schedule) until the memory itself runs out, 30 min after the
    # last observation at the burst's level (about 2700 s)
    assert min(counts[3700:4400]) >= 6
    assert counts[-1] <= 4
