"""Gateway fixtures: real ``shoal serve`` engines (session), FakeEngines and gateways on real ports (per test)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_engine import FakeEngine
from gateway_harness import EngineProcess, GatewayHandle, ServerThread, make_gateway

TINY_MAX_LEN = 1024


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with a real BPE tokenizer and chat template (the engine tests' builder)."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "engine"))
    from tiny_checkpoints import build_checkpoint

    return build_checkpoint(
        tmp_path_factory.mktemp("gateway-tiny"), "llama", seed=7, max_position_embeddings=TINY_MAX_LEN
    )


@pytest.fixture(scope="session")
def engines(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EngineProcess]]:
    """Three real engine processes serving the tiny model as ``tiny``; started together, killed at the end."""
    logs = tmp_path_factory.mktemp("engine-logs")
    started = [
        EngineProcess(str(tiny_model_dir), logs / f"engine-{i}.log", "tiny", "--num-kv-blocks", "256") for i in range(3)
    ]
    try:
        yield [engine.wait_ready() for engine in started]
    finally:
        for engine in started:
            engine.stop()


@pytest.fixture
def fake_engines() -> Iterator[Callable[..., list[tuple[FakeEngine, ServerThread]]]]:
    started: list[ServerThread] = []

    def start(count: int, models: tuple[str, ...] = ("tiny",)) -> list[tuple[FakeEngine, ServerThread]]:
        out = []
        for _ in range(count):
            engine = FakeEngine(f"fake-{len(started)}", models)
            server = ServerThread(engine.app).start()
            started.append(server)
            out.append((engine, server))
        return out

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def gateways() -> Iterator[Callable[..., GatewayHandle]]:
    started: list[GatewayHandle] = []

    def start(urls: list[str], **kwargs: Any) -> GatewayHandle:
        handle = GatewayHandle(make_gateway(urls, **kwargs))
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()
