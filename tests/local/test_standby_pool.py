"""``autoscaling.standby`` in ``shoal up``: engines started and loaded but never listed for the gateway nor seen by
the policy, promoted first by a scale-up and refilled off its path. Real ``shoal serve`` engines (the tiny random
checkpoint), the real gateway and the official ``openai`` client; the scale-up is ``EngineFleet.scale_to``, the
call the autoscaler makes (mode Recommend here, so only the test moves the count)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import openai
import pytest
from up_harness import manifest, until, write_manifest

from shoal.gateway.discovery import read_backends
from shoal.local import free_port
from shoal.local.manifest import load_manifest
from shoal.local.signals import autoscaling
from shoal.local.up import Up, UpOptions
from shoal.local.view import fleet_line

pytestmark = pytest.mark.timeout(600)


def _ask(url: str, model: str) -> str | None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=4, temperature=0
    )
    return answer.choices[0].finish_reason


def test_a_scale_up_promotes_the_ready_standby_engine_and_the_pool_refills(tmp_path: Path, tiny_model: Path) -> None:
    document = manifest(
        str(tiny_model),
        model={"source": str(tiny_model), "servedName": "tiny"},
        engine={"maxModelLen": 256, "maxNumSeqs": 2, "startupSeconds": 120},
        replicas={"min": 1, "max": 2},
        autoscaling={"enabled": True, "mode": "Recommend", "standby": 1},
        gateway={"routingPolicy": "round-robin"},
    )
    local = load_manifest(write_manifest(tmp_path, document))
    _, source = autoscaling(local.spec)
    up = Up(local, UpOptions(port=free_port(), tui=False, log_dir=tmp_path), None, source, lambda line: None)
    fleet = up.fleet

    async def scenario() -> None:
        running = asyncio.create_task(up.run(None))
        try:
            await until(lambda: [r.phase for r in fleet.replicas] == ["ready", "standby"], 180, "1 + 1 ready", up)
            await until(  # the snapshot is taken once a tick: it may show the pool engine still loading
                lambda: (
                    up.snapshot is not None and (up.snapshot.count("ready"), up.snapshot.count("standby")) == (1, 1)
                ),
                10,
                "a snapshot of it",
                up,
            )
            assert len(read_backends(up.backends)) == 1, "a standby engine is never listed"
            assert up.snapshot is not None and "standby 1 ready of 1" in fleet_line(up.snapshot)
            await until(
                lambda: up.snapshot is not None and up.snapshot.replicas[0].waiting is not None, 30, "a scrape", up
            )
            rows = {r.phase: r for r in up.snapshot.replicas}
            assert rows["standby"].waiting is None, "the policy's signals leave the pool out"
            pooled = fleet.pool()[0]
            pid = pooled.process.process.pid if pooled.process else None

            fleet.scale_to(2)  # the autoscaler's call, then its immediate apply
            fleet.apply(time.time())
            assert pooled.phase == "ready" and not pooled.pooled and pooled.starts == 1
            assert pooled.process is not None and pooled.process.process.pid == pid, "promoted, not restarted"
            assert {b.url for b in read_backends(up.backends)} == {r.url for r in fleet.active()}
            refill = fleet.pool()
            assert len(refill) == 1 and refill[0].phase == "starting", "the pool refills with a cold start"

            record = pooled.startup
            deadline = time.monotonic() + 60
            while record is None or "routed" not in record.phases():  # round-robin, once the gateway has read it
                assert time.monotonic() < deadline, "the promoted engine served no request within 60 s"
                assert await asyncio.to_thread(_ask, up.url, "tiny") == "length"
                await asyncio.sleep(0.2)
            assert record is not None and set(record.phases()) == {"promote", "routed"}

            await until(lambda: refill[0].phase == "standby", 180, "the refilled pool engine ready", up)
            assert len(read_backends(up.backends)) == 2
            assert refill[0].process is not None
            refill[0].process.stop()  # a pool engine dies: restarted, and still pooled
            await until(lambda: refill[0].restarts == 1 and refill[0].phase == "standby", 180, "its restart", up)
            assert len(read_backends(up.backends)) == 2 and refill[0].pooled
        finally:
            up.stopping.set()
            await running

    asyncio.run(scenario())


def test_a_scale_up_takes_a_pool_engine_still_loading_before_starting_another(tmp_path: Path, tiny_model: Path) -> None:
    document = manifest(
        str(tiny_model),
        engine={"maxModelLen": 256, "startupSeconds": 120},
        replicas={"min": 1, "max": 3},
        autoscaling={"enabled": True, "mode": "Recommend", "standby": 1},
    )
    local = load_manifest(write_manifest(tmp_path, document))
    _, source = autoscaling(local.spec)
    up = Up(local, UpOptions(port=free_port(), tui=False, log_dir=tmp_path), None, source, lambda line: None)
    fleet = up.fleet
    try:
        fleet.scale_to(1)
        fleet.apply(time.time())
        assert [(r.phase, r.pooled) for r in fleet.replicas] == [("starting", False), ("starting", True)]
        loading = fleet.pool()[0]
        fleet.scale_to(2)
        fleet.apply(time.time())  # no tick between: the pool engine has not been seen ready
        assert loading in fleet.active() and loading.phase == "starting" and loading.starts == 1
        assert len(fleet.active()) == 2 and len(fleet.pool()) == 1, "one promoted, one cold start refills the pool"
        assert loading.startup is not None and loading.startup.promoted
    finally:
        for replica in fleet.replicas:
            if replica.process is not None:
                replica.process.stop()
