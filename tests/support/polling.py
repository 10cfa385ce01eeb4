"""Waiting for eventual consistency (controllers, schedulers, scrapes) without sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def eventually(
    check: Callable[[], Any],
    timeout: float = 60.0,
    what: str = "",
    interval: float = 0.3,
    detail: Callable[[], str] | None = None,
) -> Any:
    """Polls until ``check`` returns something truthy and returns it; fails the test with the last value and,
    when given, ``detail()`` (what the world looked like then, for a check that only answers yes or no)."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(
        f"{what or 'condition'} not met within {timeout}s (last value: {value!r})" + (f"\n{detail()}" if detail else "")
    )
