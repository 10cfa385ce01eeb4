"""Fetcher fixtures: a tiny checkpoint and GGUF, the Hub stand-in (per test), moto's S3 servers (per session)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fetch_harness import Moto
from hub_standin import HubServer, HubStandIn


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama as ``save_pretrained`` writes it, with a real tokenizer (the engine tests' builder)."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "engine"))
    from tiny_checkpoints import build_checkpoint

    return build_checkpoint(tmp_path_factory.mktemp("fetch-tiny"), "llama", seed=3)


@pytest.fixture(scope="session")
def tiny_gguf(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_checkpoints import write_llama_gguf

    return write_llama_gguf(tiny_dir, tmp_path_factory.mktemp("fetch-gguf") / "tiny-f32.gguf")


@pytest.fixture
def hub() -> Iterator[HubServer]:
    server = HubServer(HubStandIn())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    server = Moto(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def public_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    server = Moto(tmp_path_factory.mktemp("moto-public"), auth=False)
    try:
        yield server
    finally:
        server.stop()
