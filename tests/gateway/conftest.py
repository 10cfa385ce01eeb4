"""Gateway fixtures: FakeEngine backends and gateways on real ports, torn down after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fake_engine import FakeEngine
from gateway_harness import GatewayHandle, ServerThread, make_gateway


@pytest.fixture
def fake_engines() -> Iterator[Callable[..., list[tuple[FakeEngine, ServerThread]]]]:
    started: list[ServerThread] = []

    def start(count: int, models: tuple[str, ...] = ("tiny",)) -> list[tuple[FakeEngine, ServerThread]]:
        out = []
        for i in range(count):
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
