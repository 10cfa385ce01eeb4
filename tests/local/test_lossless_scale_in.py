"""Lossless scale-in, counted: ``shoal up``'s own fleet and gateway (the ``Up`` object ``shoal up`` runs, here in
the test's process so the test can resize it) serving the real SmolLM2 model from two engine processes, a steady
streaming load from the official ``openai`` client, and a scale-down to one engine through ``EngineFleet.scale_to``,
the call the autoscaler makes. Every request must end with a ``finish_reason`` and its usage chunk: zero failed,
zero truncated."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import pytest
from support.stream_load import StreamLoad, tokens_for_seconds
from up_harness import manifest, until, write_manifest

from shoal.engine_kinds import adapter
from shoal.local import free_port, metric
from shoal.local.fleet import EngineReplica
from shoal.local.manifest import load_manifest
from shoal.local.signals import autoscaling
from shoal.local.up import Up, UpOptions

pytestmark = pytest.mark.timeout(900)

MODEL = "smollm2"
RUNNING, WAITING = adapter("shoal").metrics.running, adapter("shoal").metrics.waiting
# with ignore_eos, a stream of STREAM_SECONDS at a lone request's rate (longer under the load), sized once the engines
# are up: longer than the gateway takes to drop the engine (1 s), so SIGTERM finds streams in flight on any CPU
# (200 fixed tokens were 6 s here but under 3 s on a faster CPU), and well within the drain's grace (maxModelLen
# 2048 at the CPU's default 0.25 s a token, capped)
STREAM_SECONDS, MIN_TOKENS, MAX_TOKENS = 8.0, 200, 1800


async def _in_flight_until_signalled(victim: EngineReplica) -> float:
    """The engine's running + waiting requests last seen before ``shoal up`` sent it SIGTERM."""
    url, seen = victim.url or "", 0.0
    while not victim.signalled:
        with contextlib.suppress(httpx.HTTPError):
            seen = await asyncio.to_thread(lambda: metric(url, RUNNING) + metric(url, WAITING))
        await asyncio.sleep(0.2)
    return seen


def test_a_scale_down_under_streaming_load_loses_no_request(tmp_path: Path) -> None:
    document = manifest(
        "smollm2-135m",
        model={"source": "smollm2-135m", "servedName": MODEL},
        engine={"maxModelLen": 2048, "maxNumSeqs": 4, "startupSeconds": 300},
        replicas={"min": 1, "max": 2, "count": 2},
        autoscaling={"enabled": False},
        gateway={"routingPolicy": "round-robin"},  # both engines busy: prefix-aware would keep one prompt on one
    )
    local = load_manifest(write_manifest(tmp_path, document))
    _, source = autoscaling(local.spec)
    up = Up(local, UpOptions(port=free_port(), tui=False, log_dir=tmp_path), None, source, lambda line: None)
    load = StreamLoad(up.url, clients=4, model=MODEL, max_tokens=MIN_TOKENS)

    async def scenario() -> None:
        running = asyncio.create_task(up.run(None))
        try:
            await until(lambda: len(up.fleet.ready_backends()) == 2, 600, "two ready engines", up)
            await asyncio.sleep(up.fleet.discovery_delay_s * 2)  # the gateway has read both
            load.max_tokens = await asyncio.to_thread(
                tokens_for_seconds, up.url, MODEL, STREAM_SECONDS, MIN_TOKENS, MAX_TOKENS
            )
            load.start()
            await until(lambda: load.completed >= 4, 240, "the load flowing through both engines", up)
            up.fleet.scale_to(1)  # what the autoscaler does (LocalAutoscaler.step)
            await until(lambda: any(r.phase == "draining" for r in up.fleet.replicas), 30, "a draining engine", up)
            victim = next(r for r in up.fleet.replicas if r.phase == "draining")
            in_flight_at_sigterm = await _in_flight_until_signalled(victim)
            assert victim.kill_at is not None
            grace_left = victim.kill_at - time.time()
            await until(lambda: victim not in up.fleet.replicas, grace_left + 30, "the drained engine gone", up)
            drained_at = time.monotonic()
            await until(lambda: load.completed >= 4 + 8, 240, "requests after the scale-down", up)
            assert any(t > drained_at for t in load.finished_at)
            assert in_flight_at_sigterm > 0, "the drained engine had nothing in flight: the test proved nothing"
        finally:
            await asyncio.to_thread(load.stop)
            up.stopping.set()
            await running

    asyncio.run(scenario())
    texts = [e.text for e in up.fleet.events]
    assert any(t.endswith("drained and stopped") for t in texts), texts
    assert load.failures == [], (
        f"{len(load.failures)} failed of {load.completed + len(load.failures)}: {load.failures[:5]}"
    )
    assert load.completed >= 12
