"""Which adapter sits in which of the ``--max-loras`` slots: pure bookkeeping, the scheduler's to consult.

The law: a request's adapter must be in a slot while the request runs. ``acquire`` finds it there, or puts it in
an empty slot, or evicts the least recently released idle adapter (one with no request running); with every slot
held by running requests it returns ``None`` and the request keeps waiting. ``release`` marks the end of a running
request (finished or preempted); an adapter whose last request left becomes idle, most recently used last.
The model runner copies an adapter's weights into its slot before the step that first uses it there.
"""

from __future__ import annotations

from collections import OrderedDict


class LoRASlots:
    """A fixed pool of adapter slots with LRU eviction of idle adapters."""

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"max_loras must be >= 1, got {num_slots}")
        self.holders: list[str | None] = [None] * num_slots
        self._slot_of: dict[str, int] = {}
        self._running: dict[str, int] = {}
        self._idle: OrderedDict[int, None] = OrderedDict()  # resident, nothing running: least recently used first
        self.num_evictions = 0

    def slot_of(self, name: str) -> int | None:
        return self._slot_of.get(name)

    def running(self, name: str) -> int:
        """Running requests that hold ``name``'s slot."""
        return self._running.get(name, 0)

    def acquire(self, name: str) -> int | None:
        """The slot of ``name`` for one more running request, or ``None`` while every slot is busy."""
        slot = self._slot_of.get(name)
        if slot is None:
            slot = self._free_slot()
            if slot is None:
                return None
            self.holders[slot] = name
            self._slot_of[name] = slot
        self._idle.pop(slot, None)
        self._running[name] = self._running.get(name, 0) + 1
        return slot

    def release(self, name: str) -> None:
        """One running request of ``name`` left the batch."""
        count = self._running[name] - 1
        if count:
            self._running[name] = count
            return
        del self._running[name]
        self._idle[self._slot_of[name]] = None

    def drop(self, name: str) -> None:
        """Empties ``name``'s slot (the adapter was unloaded); it must have nothing running."""
        if self._running.get(name):
            raise ValueError(f"adapter {name!r} still has requests running")
        slot = self._slot_of.pop(name, None)
        if slot is not None:
            self._idle.pop(slot, None)
            self.holders[slot] = None

    def _free_slot(self) -> int | None:
        if None in self.holders:
            return self.holders.index(None)
        if not self._idle:
            return None
        slot, _ = self._idle.popitem(last=False)
        evicted = self.holders[slot]
        assert evicted is not None
        del self._slot_of[evicted]
        self.num_evictions += 1
        return slot
