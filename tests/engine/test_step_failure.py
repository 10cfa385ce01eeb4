"""A step that raises kills the engine cleanly: every in-flight request fails with the error, the process is told
to exit, and new requests get a 503. The fault is injected into a real engine's model runner (a bug the fuzzer once
found this way: a stop token id outside the vocabulary indexed past the logits). Before, the failure path itself
raised on an ``n > 1`` generation, and a request admitted while the step thread died waited for an answer forever."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.devices import TEST_DEVICE

from shoal.engine.core import EngineConfig, EngineCore, SamplingParams
from shoal.engine.core.scheduler import SchedulerOutput
from shoal.engine.server.async_engine import AsyncEngine, Child
from shoal.engine.server.kv_event_hub import KVEventHub
from shoal.engine.server.metrics import ServerMetrics
from shoal.engine.server.output_stream import StreamFailed
from shoal.protocol.errors import APIError


def _core_whose_step_fails(model_dir: Path) -> EngineCore:
    core = EngineCore.from_config(
        EngineConfig(
            model=str(model_dir), dtype="float32", block_size=4, num_kv_blocks=32, max_model_len=40, device=TEST_DEVICE
        )
    )

    def execute(batch: SchedulerOutput) -> tuple[dict[str, int], dict]:
        raise RuntimeError("injected step failure")

    core.runner.execute = execute  # type: ignore[method-assign]
    return core


async def test_a_failed_step_fails_every_request_and_the_engine(tiny_llama_dir: Path) -> None:
    engine = AsyncEngine(lambda: _core_whose_step_fails(tiny_llama_dir), ServerMetrics("tiny"), KVEventHub(4, "e"))
    died = asyncio.Event()
    engine.on_dead = died.set
    engine.start()
    try:
        for _ in range(600):
            if engine.ready:
                break
            await asyncio.sleep(0.1)
        params = SamplingParams(temperature=0.0, max_tokens=4)
        first = await engine.submit("a", [Child(0, [5, 6, 7], params), Child(1, [5, 6, 7], params)])
        with pytest.raises(StreamFailed, match="injected step failure"):
            await asyncio.wait_for(first.stream.get(), timeout=60)
        first.close()
        try:  # sent while the engine dies: admitted and then failed, or refused; never left waiting
            second = await asyncio.wait_for(engine.submit("b", [Child(0, [8, 9], params)]), timeout=60)
        except APIError as refused:
            assert refused.status_code == 503
        else:
            with pytest.raises(StreamFailed):
                await asyncio.wait_for(second.stream.get(), timeout=60)
            second.close()
        await asyncio.wait_for(died.wait(), timeout=10)
        assert engine.dead and not engine.ready
        with pytest.raises(APIError) as refused:
            await engine.submit("c", [Child(0, [5], params)])
        assert refused.value.status_code == 503
    finally:
        engine.stop()
