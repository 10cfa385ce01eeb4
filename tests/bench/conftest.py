"""Bench fixtures: a real ``shoal serve`` with the tiny model (the server tests' harness)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER_TESTS = Path(__file__).resolve().parents[1] / "server"
if str(SERVER_TESTS) not in sys.path:
    sys.path.insert(0, str(SERVER_TESTS))

from serve_harness import ServeProcess, build_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def bench_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model = build_tiny_model(tmp_path_factory.mktemp("bench-tiny-llama"))
    server = ServeProcess(model, tmp_path_factory.mktemp("bench-serve") / "serve.log", "--num-kv-blocks", "512")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
