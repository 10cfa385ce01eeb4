"""Fixtures of the simulator tests."""

from __future__ import annotations

import pytest
from sim_fixtures import small_profile

from shoal.simulate.profile import EngineProfile


@pytest.fixture
def profile() -> EngineProfile:
    return small_profile()
