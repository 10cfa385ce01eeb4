"""The adapter slots' law: a running request's adapter stays in its slot, idle adapters are evicted least recently
used first, and a request whose adapter finds no slot waits in the scheduler (never fails) until one frees."""

from __future__ import annotations

import pytest

from shoal.engine.core.block_manager import BlockManager
from shoal.engine.core.request import Request, RequestStatus
from shoal.engine.core.sampling_params import SamplingParams
from shoal.engine.core.scheduler import Scheduler
from shoal.engine.lora import LoRASlots
from shoal.protocol.block_hash import adapter_extra_key, hash_blocks


def test_idle_adapters_are_evicted_least_recently_used_first() -> None:
    slots = LoRASlots(2)
    a, b = slots.acquire("a"), slots.acquire("b")
    assert {a, b} == {0, 1}
    slots.release("b")
    slots.release("a")  # both idle now; b was released first
    assert slots.acquire("c") == b and slots.slot_of("b") is None
    assert slots.slot_of("a") == a and slots.num_evictions == 1


def test_an_adapter_with_requests_running_is_never_evicted() -> None:
    slots = LoRASlots(1)
    slot = slots.acquire("a")
    assert slots.acquire("a") == slot, "a second request shares the slot"
    slots.release("a")
    assert slots.acquire("b") is None, "a still has a request running"
    slots.release("a")
    assert slots.acquire("b") == slot
    with pytest.raises(ValueError, match="still has requests running"):
        slots.drop("b")


def test_dropping_an_idle_adapter_frees_its_slot() -> None:
    slots = LoRASlots(1)
    slots.acquire("a")
    slots.release("a")
    slots.drop("a")
    assert slots.holders == [None] and slots.acquire("b") == 0 and slots.num_evictions == 0


def _request(i: int, lora_name: str | None) -> Request:
    return Request(f"r{i}", [1, 2, 3, 4, 5], SamplingParams(max_tokens=2), arrival_time=float(i), lora_name=lora_name)


def test_a_request_waits_for_a_slot_then_runs() -> None:
    scheduler = Scheduler(BlockManager(64, 4, True), 256, 8, LoRASlots(1))
    first, second, base = _request(0, "a"), _request(1, "b"), _request(2, None)
    for request in (first, second, base):
        scheduler.add_request(request)
    out = scheduler.schedule()
    assert out.scheduled == [first], "b finds no slot and waits at the head of the queue"
    assert second.status == RequestStatus.WAITING
    scheduler.finish_request(first, RequestStatus.FINISHED_STOPPED)
    assert scheduler.schedule().scheduled == [second, base]


def test_a_preempted_request_gives_its_slot_back() -> None:
    slots = LoRASlots(1)
    scheduler = Scheduler(BlockManager(64, 4, True), 256, 8, slots)
    request = _request(0, "a")
    scheduler.add_request(request)
    scheduler.schedule()
    assert slots.running("a") == 1
    scheduler._preempt(request)
    assert slots.running("a") == 0 and slots.acquire("b") == 0


def test_adapters_hash_their_blocks_apart() -> None:
    tokens = list(range(32))
    base, a, b = (hash_blocks(tokens, 16, adapter_extra_key(name)) for name in (None, "a", "b"))
    assert base == hash_blocks(tokens, 16), "the base model's hashes are unchanged"
    assert len({base[0], a[0], b[0]}) == 3
