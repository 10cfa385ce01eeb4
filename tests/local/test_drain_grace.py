"""``shoal up``'s drain grace: sized when the drain begins from the time per output token observed by then (the
CPU's default a floor), the spec's override winning; and a draining engine still streaming when its grace nears
its end is told so by a second SIGTERM, which ends each stream cleanly instead of a kill cutting it."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from tiny_checkpoints import build_checkpoint
from up_harness import manifest, write_manifest

from shoal.local.drain import drain_grace, engine_drain_s
from shoal.local.fleet import DrainGrace, EngineFleet
from shoal.local.manifest import load_manifest
from shoal.local.up import engine_launch
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.operator.termination import EXIT_SECONDS, GRACE_CAP_SECONDS, PRESTOP_SLEEP_SECONDS

pytestmark = pytest.mark.timeout(300)


def _spec(tmp_path: Path, source: str = "smollm2-135m", **engine: object) -> InferenceDeploymentSpec:
    document = manifest(source, model={"source": source, "servedName": "m"}, engine=engine)
    return load_manifest(write_manifest(tmp_path, document)).spec


def test_the_grace_follows_the_observed_time_per_token_with_the_cpus_default_as_floor(tmp_path: Path) -> None:
    spec = _spec(tmp_path, maxModelLen=512)
    # 512 tokens x 0.25 s (the CPU's default) x 1.2 = 154 s of streaming, plus the pre-stop and the exit
    assumed = drain_grace(spec, None)
    assert assumed.seconds == PRESTOP_SLEEP_SECONDS + 154 + EXIT_SECONDS
    assert "default" in assumed.why and assumed.warning is None
    assert drain_grace(spec, 0.1).seconds == assumed.seconds, "a fast P90 at light load never shortens it"
    slow = drain_grace(spec, 0.5)  # what an AVX2-only CPU streamed under a full test run
    assert slow.seconds == PRESTOP_SLEEP_SECONDS + 308 + EXIT_SECONDS
    assert "observed 0.5 s a token" in slow.why and slow.warning is None


def test_past_the_cap_the_grace_is_the_cap_and_says_what_to_lower(tmp_path: Path) -> None:
    spec = _spec(tmp_path, maxModelLen=4096)
    grace = drain_grace(spec, 0.5)  # 4096 x 0.5 x 1.2 = 2458 s
    assert grace.seconds == GRACE_CAP_SECONDS
    assert grace.warning is not None and "spec.engine.maxModelLen" in grace.warning
    unset = drain_grace(_spec(tmp_path), 0.5)
    assert unset.seconds == GRACE_CAP_SECONDS and "maxModelLen is unset" in unset.why


def test_the_specs_grace_wins_and_is_checked_against_the_observed_time(tmp_path: Path) -> None:
    spec = _spec(tmp_path, maxModelLen=512, terminationGracePeriodSeconds=120)
    assert drain_grace(spec, None) == DrainGrace(120.0, "spec.engine.terminationGracePeriodSeconds")
    short = drain_grace(spec, 0.5)
    assert short.seconds == 120 and short.warning is not None
    assert "terminationGracePeriodSeconds to 323" in short.warning
    assert engine_drain_s(spec) == 120 - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS


def test_the_engine_never_ends_its_drain_before_the_fleet_does(tmp_path: Path) -> None:
    spec = _spec(tmp_path, maxModelLen=512)
    argv = engine_launch(spec, tmp_path).argv
    drain = int(argv[argv.index("--shutdown-grace") + 1])
    assert drain == engine_drain_s(spec) == GRACE_CAP_SECONDS - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS
    assert drain >= drain_grace(spec, 10.0).seconds - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS  # as in a pod


@dataclass
class _Stream:
    """What the client thread saw of its stream."""

    chunks: int = 0
    finish_reason: str | None = None
    at: float | None = None  # when it ended


def test_a_drain_still_streaming_near_its_grace_ends_each_stream_cleanly(tmp_path: Path) -> None:
    """A real ``shoal serve`` (the tiny random checkpoint, 65,536 positions) streaming through the official
    ``openai`` client when the fleet drains it with a 25 s grace. The stream asks for 65,000 tokens: a fast CPU
    decodes the tiny model at 500+ tokens a second (8,000 once ended by length inside the grace), so the request
    must outlast any CPU's 15 s before the second SIGTERM by a wide margin; the test's time is the grace's."""
    model = build_checkpoint(tmp_path / "model", "llama", seed=1, max_position_embeddings=65536)
    spec = _spec(tmp_path, str(model), maxModelLen=65536, maxNumSeqs=2, startupSeconds=120)
    launch = engine_launch(spec, tmp_path)
    assert launch.term_ends_grace
    fleet = EngineFleet(launch, tmp_path / "backends.txt", drain_grace=lambda _tpot: DrainGrace(25.0, "the test's"))
    ended = _Stream()

    def stream(url: str) -> None:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        chunks = client.completions.create(
            model="m", prompt="drain", max_tokens=65000, stream=True, extra_body={"ignore_eos": True}
        )
        for chunk in chunks:
            ended.chunks += 1
            if chunk.choices and chunk.choices[0].finish_reason is not None:
                ended.finish_reason = chunk.choices[0].finish_reason
        ended.at = time.time()

    async def scenario() -> None:
        async with httpx.AsyncClient() as client:
            fleet.scale_to(1)
            deadline = time.monotonic() + 120
            while not fleet.ready_backends():
                assert time.monotonic() < deadline, [e.text for e in fleet.events]
                await fleet.tick(time.time(), client)
                await asyncio.sleep(0.2)
            replica = fleet.replicas[0]
            streaming = threading.Thread(target=stream, args=(replica.url,))
            streaming.start()
            while ended.chunks < 10:
                await asyncio.sleep(0.1)
            fleet.scale_to(0)
            fleet.apply(time.time())
            assert replica.phase == "draining" and replica.kill_at is not None
            kill_at = replica.kill_at
            while replica in fleet.replicas:
                await fleet.tick(time.time(), client)
                await asyncio.sleep(0.2)
            await asyncio.to_thread(streaming.join, 30)
            assert ended.finish_reason == "abort", ended
            assert ended.at is not None and ended.at < kill_at, "the stream ended before the kill, not by it"
            assert replica.process is not None and replica.process.process.returncode == 0
            texts = [e.text for e in fleet.events]
            assert any("draining, for up to 25 s (the test's)" in t for t in texts), texts
            assert any("grace is over" in t for t in texts), texts

    asyncio.run(scenario())
