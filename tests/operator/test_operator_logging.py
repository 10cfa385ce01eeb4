"""The operator's log keeps quiet about each status-refresh tick but never hides a failing refresh."""

from __future__ import annotations

import logging

import pytest

from shoal.operator.cli import quiet_timer_successes


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


@pytest.mark.parametrize(
    ("level", "message", "kept"),
    [
        (logging.INFO, "Timer 'refresh' succeeded.", False),
        (logging.ERROR, "Timer 'refresh' failed with an exception. Will retry.", True),
        (logging.ERROR, "Timer 'refresh' failed temporarily: 409: conflict", True),
        (logging.INFO, "Handler 'reconcile' succeeded.", True),
    ],
)
def test_only_timer_successes_are_dropped(level: int, message: str, kept: bool) -> None:
    assert quiet_timer_successes(record(level, message)) is kept
