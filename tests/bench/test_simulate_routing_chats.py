"""The routing scenario's chats (``bench/simulate_routing.py``): random groups, or equal ones as the gateway's
closed loop sends them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from simulate_routing import chats


def test_equal_groups_give_every_group_the_same_count_in_a_seeded_order() -> None:
    trace = chats(64, 8, 385, 60, 32, 3.5, seed=7, equal_groups=True)
    assert np.bincount(trace.prefix_group).tolist() == [8] * 8
    assert (trace.prefix_tokens == 385).all()
    again = chats(64, 8, 385, 60, 32, 3.5, seed=7, equal_groups=True)
    assert np.array_equal(trace.prefix_group, again.prefix_group)
    other = chats(64, 8, 385, 60, 32, 3.5, seed=8, equal_groups=True)
    assert not np.array_equal(trace.prefix_group, other.prefix_group)


def test_random_groups_vary_in_size() -> None:
    sizes = [np.bincount(chats(64, 8, 385, 60, 32, 3.5, seed=s).prefix_group, minlength=8) for s in range(5)]
    assert all(size.sum() == 64 for size in sizes)
    assert any(size.max() > 8 for size in sizes)
