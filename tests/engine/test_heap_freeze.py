"""``load_then_freeze``: the collector is off while a model loads, and what loaded is out of later collections."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from shoal.engine.core.heap import load_then_freeze


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()  # hand this test process's objects back to the collector
    if enabled:
        gc.enable()
    else:
        gc.disable()


class _Node:
    """A reference cycle: only the cyclic collector can free it."""

    def __init__(self) -> None:
        self.me = self


def test_the_collector_is_off_during_the_load_and_back_on_after() -> None:
    gc.enable()
    seen: list[bool] = []
    assert load_then_freeze(lambda: seen.append(gc.isenabled()) or "model") == "model"
    assert seen == [False]
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    load_then_freeze(lambda: None)
    assert not gc.isenabled()


def test_what_the_load_built_is_frozen_and_its_garbage_collected_first() -> None:
    gc.enable()
    gc.unfreeze()
    garbage: list[weakref.ref[_Node]] = []

    def load() -> list[dict[str, int]]:
        garbage.append(weakref.ref(_Node()))  # a cycle the load dropped: freed before the freeze, not kept forever
        return [{"weights": i} for i in range(1000)]

    model = load_then_freeze(load)
    assert garbage[0]() is None
    assert gc.get_freeze_count() >= len(model)
    tracked = {id(x) for x in gc.get_objects()}  # the generations a collection walks
    assert id(model) not in tracked and not any(id(part) in tracked for part in model)


def test_a_failed_load_freezes_nothing_and_restores_the_collector() -> None:
    gc.enable()
    gc.unfreeze()

    def load() -> None:
        raise RuntimeError("no such checkpoint")

    with pytest.raises(RuntimeError, match="no such checkpoint"):
        load_then_freeze(load)
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()
