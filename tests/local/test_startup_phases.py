"""A replica's start-up record joins the fleet's moments with the engine's own into contiguous phases."""

from __future__ import annotations

import pytest

from shoal.local.startup import EngineStartup, StartupRecord, parse_engine_startup

PAGE = """\
# TYPE shoal_engine_startup_seconds gauge
shoal_engine_startup_seconds{model="m",phase="imports"} 2.0
shoal_engine_startup_seconds{model="m",phase="planning"} 0.5
shoal_engine_startup_seconds{model="m",phase="loading"} 3.0
shoal_engine_startup_seconds{model="m",phase="profiling"} 0.0
shoal_engine_startup_seconds{model="m",phase="warming"} 1.0
shoal_engine_startup_seconds{model="m",phase="other"} 0.5
# TYPE shoal_engine_ready_time_seconds gauge
shoal_engine_ready_time_seconds{model="m"} 107.5
# TYPE shoal_engine_first_token_time_seconds gauge
shoal_engine_first_token_time_seconds{model="m"} 108.5
"""


def test_phases_run_from_the_decision_to_the_first_token() -> None:
    record = StartupRecord(decided=100.0, spawned=100.2, listed=107.75, engine=parse_engine_startup(PAGE))
    phases = record.phases()
    assert list(phases) == ["spawn", "imports", "planning", "loading", "warming", "other", "listed", "routed"]
    assert phases["spawn"] == pytest.approx(0.5)
    assert "profiling" not in phases  # a phase that took no time is left out
    assert phases["listed"] == pytest.approx(0.25) and phases["routed"] == pytest.approx(0.75)
    assert sum(phases.values()) == pytest.approx(8.5)
    assert record.complete and record.summary().startswith("decision -> first token 8.5 s: spawn 0.50 s")


def test_until_it_serves_the_record_ends_at_ready() -> None:
    engine = parse_engine_startup(PAGE.split("# TYPE shoal_engine_first_token")[0])
    record = StartupRecord(decided=100.0, listed=107.75, engine=engine)
    assert not record.complete and "routed" not in record.phases()
    assert record.summary().startswith("decision -> listed 7.8 s")


def test_an_engine_that_publishes_nothing_gives_no_phases() -> None:
    record = StartupRecord(decided=100.0, listed=101.0, engine=EngineStartup())
    assert record.phases() == {} and "not published" in record.summary()
    assert parse_engine_startup("") == EngineStartup()
