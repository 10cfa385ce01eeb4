"""The engine's store of finished responses: bounded by count, by bytes and by age, least recently used out first."""

from __future__ import annotations

from shoal.engine.server.response_store import ResponseStore


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_least_recently_used_goes_first_past_the_count() -> None:
    store = ResponseStore(max_entries=2)
    store.put("a", said("1"))
    store.put("b", said("2"))
    assert store.get("a") == said("1")  # now b is the least recently used
    store.put("c", said("3"))
    assert store.get("b") is None and store.get("a") == said("1") and store.get("c") == said("3")
    assert len(store) == 2


def test_the_bytes_bound_evicts_and_one_too_large_is_not_kept() -> None:
    store = ResponseStore(max_bytes=100)
    store.put("a", said("x" * 40))
    store.put("b", said("y" * 40))
    store.put("c", said("z" * 40))  # 3 x 44 bytes > 100: a goes
    assert store.get("a") is None and store.get("b") is not None and store.get("c") is not None
    store.put("huge", said("h" * 200))
    assert store.get("huge") is None and len(store) == 2


def test_a_response_expires_after_its_lifetime() -> None:
    clock = Clock()
    store = ResponseStore(ttl_s=60, clock=clock)
    store.put("a", said("1"))
    clock.now = 59.9
    assert store.get("a") == said("1")
    clock.now = 60.0
    assert store.get("a") is None and len(store) == 0


def test_storing_again_replaces_and_a_copy_is_handed_out() -> None:
    store = ResponseStore(max_bytes=50)
    store.put("a", said("x" * 40))
    store.put("a", said("y" * 40))  # the old bytes are given back: both would not fit
    got = store.get("a")
    assert got == said("y" * 40)
    assert got is not None
    got.append({"role": "user", "content": "more"})
    assert store.get("a") == said("y" * 40)
