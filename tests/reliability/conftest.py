"""Reliability fixtures: the gateway test harness (real gateways, FakeEngines, real ``shoal serve`` engines),
with engines of their own, since these tests kill, stop and overload them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "gateway"), str(TESTS / "engine")]

from fake_engine import FakeEngine  # noqa: E402
from gateway_harness import EngineProcess, GatewayHandle, ServerThread, make_gateway  # noqa: E402
from tiny_checkpoints import build_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with a real BPE tokenizer, served as ``tiny``."""
    return build_checkpoint(tmp_path_factory.mktemp("reliability-tiny"), "llama", seed=11, max_position_embeddings=2048)


@pytest.fixture(scope="session")
def targets(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real engine (its own request limit kept short, so a valid but long request cannot look like a hang)
    and a gateway in front of it, that the hostile-input, fuzzing and served-schema tests share."""
    engine = EngineProcess(
        str(tiny_model),
        tmp_path_factory.mktemp("fuzz") / "engine.log",
        "tiny",
        "--max-model-len",
        "512",
        "--request-timeout",
        "10",
    ).wait_ready()
    handle = GatewayHandle(
        make_gateway([engine.url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model)}, request_timeout_s=15.0)
    )
    try:
        handle.wait_healthy(1)
        yield {"engine": engine.url, "gateway": handle.url}
    finally:
        handle.stop()
        engine.stop()


@pytest.fixture
def start_engines(tiny_model: Path, tmp_path: Path) -> Iterator[Callable[..., list[EngineProcess]]]:
    """Starts real engines for one test (ready when returned) and stops whatever is left of them after it."""
    started: list[EngineProcess] = []

    def start(count: int, *extra: str) -> list[EngineProcess]:
        batch = [
            EngineProcess(str(tiny_model), tmp_path / f"engine-{len(started) + i}.log", "tiny", *extra)
            for i in range(count)
        ]
        started.extend(batch)
        return [engine.wait_ready() for engine in batch]

    yield start
    for engine in started:
        engine.stop()


@pytest.fixture
def gateway_over() -> Iterator[Callable[..., GatewayHandle]]:
    """A real gateway (in this process, on a real port) over the given replica URLs."""
    started: list[GatewayHandle] = []

    def start(urls: list[str], **kwargs: Any) -> GatewayHandle:
        started.append(GatewayHandle(make_gateway(urls, **kwargs)))
        return started[-1]

    yield start
    for handle in started:
        handle.stop()


@pytest.fixture
def fake_engine() -> Iterator[tuple[FakeEngine, ServerThread]]:
    engine = FakeEngine("fake")
    server = ServerThread(engine.app).start()
    yield engine, server
    server.stop()
