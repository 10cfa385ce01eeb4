"""Bench fixtures: a real ``shoal serve`` with the tiny model (the server tests' harness), and a real ``shoal gateway``
with auth on in front of it, as on a cluster."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER_TESTS = Path(__file__).resolve().parents[1] / "server"
if str(SERVER_TESTS) not in sys.path:
    sys.path.insert(0, str(SERVER_TESTS))

from serve_harness import TINY_MODEL_NAME, ServeProcess, build_tiny_model  # noqa: E402

from shoal.local import LocalProcess, shoal_command  # noqa: E402


@pytest.fixture(scope="session")
def bench_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("bench-tiny-llama"))


@pytest.fixture(scope="session")
def bench_target(bench_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model = bench_model
    server = ServeProcess(model, tmp_path_factory.mktemp("bench-serve") / "serve.log", "--num-kv-blocks", "512")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def authed_gateway(
    bench_target: ServeProcess, bench_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalProcess, str]]:
    """``shoal gateway`` over ``bench_target`` with one tenant, and that tenant's key: a request without it gets a
    401."""
    key = "sk-bench-tenant"
    workdir = tmp_path_factory.mktemp("bench-gateway")
    keys = workdir / "keys.yaml"
    keys.write_text(f"tenants:\n  bench:\n    api_keys: [{key}]\n")
    argv = shoal_command(
        "gateway",
        "--backend",
        bench_target.url,
        "--api-keys",
        str(keys),
        "--tokenizer",
        f"{TINY_MODEL_NAME}={bench_model}",
        "--health-interval",
        "0.2",
        "--log-level",
        "warning",
    )
    gateway = LocalProcess(argv, workdir / "gateway.log")
    try:
        gateway.wait_ready(timeout=60)
        yield gateway, key
    finally:
        gateway.stop()
