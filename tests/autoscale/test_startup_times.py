"""StartupTimes learns how long replicas take from starting to ready, from the phases the sources report."""

from __future__ import annotations

import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.autoscale import ReplicaSignals
from shoal.autoscale.startup import StartupTimes


def test_a_replica_seen_starting_then_ready_took_the_time_between_its_two_sinces() -> None:
    times = StartupTimes()
    assert times.typical is None
    times.observe([ReplicaSignals("a", "ready", 0.0), ReplicaSignals("b", "starting", 100.0)])
    times.observe([ReplicaSignals("a", "ready", 0.0), ReplicaSignals("b", "starting", 100.0)])
    assert times.typical is None  # still loading; "a" was never seen starting, so it says nothing
    times.observe([ReplicaSignals("a", "ready", 0.0), ReplicaSignals("b", "ready", 280.0)])
    assert times.typical == 180.0
    times.observe([ReplicaSignals("a", "ready", 0.0), ReplicaSignals("b", "ready", 280.0)])
    assert times.typical == 180.0  # counted once
    assert times.longest == 180.0
    times.observe([ReplicaSignals("b", "ready", 280.0), ReplicaSignals("e", "starting", 300.0)])
    times.observe([ReplicaSignals("b", "ready", 280.0), ReplicaSignals("e", "ready", 320.0)])
    # the median is robust to one slow pull; a known due time needs the slowest seen
    assert (times.typical, times.longest) == (100.0, 180.0)


def test_a_replica_gone_while_starting_is_forgotten_and_a_restart_counts_from_its_new_start() -> None:
    times = StartupTimes()
    times.observe([ReplicaSignals("c", "starting", 0.0)])
    times.observe([])  # removed before it loaded (a scale-down takes loading replicas first)
    times.observe([ReplicaSignals("c", "ready", 500.0)])
    assert times.typical is None
    times.observe([ReplicaSignals("d", "starting", 0.0)])
    times.observe([ReplicaSignals("d", "starting", 300.0)])  # it crashed and started again at 300 s
    times.observe([ReplicaSignals("d", "ready", 360.0)])
    assert times.typical == 60.0


def test_a_replica_that_served_and_turns_unready_again_is_not_a_start_up() -> None:
    """The operator reports an unready pod as starting since its creation: a container restart an hour in must
    not count as an hour-long start-up."""
    times = StartupTimes()
    times.observe([ReplicaSignals("p", "starting", 0.0)])
    times.observe([ReplicaSignals("p", "ready", 120.0)])
    times.observe([ReplicaSignals("p", "starting", 0.0)])  # restarted at 3,600 s, reported since its creation
    times.observe([ReplicaSignals("p", "ready", 3660.0)])
    assert times.typical == 120.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 900.0), min_size=1, max_size=40), st.integers(1, 4))
def test_typical_is_the_median_of_the_last_start_ups_seen(durations: list[float], together: int) -> None:
    """Replicas start in waves of ``together`` (a scale-up adds several at once) and each becomes ready after its
    own start-up; what is kept is the median of the last 16, whatever the order they finish in."""
    times = StartupTimes(keep=16)
    finished: list[float] = []
    now = 0.0
    for wave in range(0, len(durations), together):
        batch = durations[wave : wave + together]
        starting = {f"w{wave}-{i}": now for i in range(len(batch))}
        times.observe([ReplicaSignals(name, "starting", since) for name, since in starting.items()])
        for i in sorted(range(len(batch)), key=lambda i: batch[i]):  # ready in order of their start-ups
            name = f"w{wave}-{i}"
            del starting[name]
            times.observe(
                [ReplicaSignals(name, "ready", now + batch[i])]
                + [ReplicaSignals(other, "starting", since) for other, since in starting.items()]
            )
            finished.append(batch[i])
        now += 1000.0
    assert times.typical is not None
    assert abs(times.typical - statistics.median(finished[-16:])) <= 1e-6 * max(1.0, times.typical)
