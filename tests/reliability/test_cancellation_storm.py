"""A few hundred streaming requests through the gateway to two real engines, each abandoned at a random point
(before routing, before the first token, mid-stream): afterwards every engine holds no request and no KV block,
and the gateway holds no lease, no upstream exchange and no task for them. Thousands: bench/cancellation_storm.py."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from cancellation_storm import storm, wait_until_idle
from support.polling import eventually

pytestmark = pytest.mark.timeout(300)


def gateway_tasks(handle) -> list[str]:  # type: ignore[no-untyped-def]
    """The asyncio tasks alive in the gateway's event loop (requests, watchers, followers, health checks)."""
    loop = handle.server.server.servers[0].get_loop()

    async def tasks() -> list[str]:
        current = asyncio.current_task()
        return [repr(task.get_coro()) for task in asyncio.all_tasks() if task is not current]

    return asyncio.run_coroutine_threadsafe(tasks(), loop).result(10)


def test_a_storm_of_cancellations_leaves_nothing_behind(start_engines, gateway_over, tiny_model) -> None:
    engines = start_engines(2, "--num-kv-blocks", "512")
    handle = gateway_over([e.url for e in engines], byte_tokenized=(), tokenizers={"tiny": str(tiny_model)})
    handle.wait_healthy(2)
    idle_tasks = len(gateway_tasks(handle))
    result = asyncio.run(storm(handle.url, requests=300, concurrency=24, max_cancel_s=2.5, seed=7))
    assert result.errors == 0 and result.completed == 0
    assert result.cancelled_mid_stream >= 30 and result.cancelled_before_first_byte >= 10  # both kinds
    leftovers = wait_until_idle([e.url for e in engines], handle.url)
    assert all(v == 0 for reading in leftovers.values() for v in reading.values()), leftovers
    # a closed connection's task may take a moment to end (and a health check may be running): a leak stays
    eventually(
        lambda: len(gateway_tasks(handle)) <= idle_tasks,
        timeout=30,
        what=f"the gateway back to its {idle_tasks} idle tasks",
        detail=lambda: "\n".join(gateway_tasks(handle)),
    )
    for replica in handle.gateway.fleet.replicas.values():
        assert replica.in_flight == 0 and replica.load_tokens == 0
