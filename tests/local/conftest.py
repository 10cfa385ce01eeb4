"""Local-mode fixtures: the tiny random checkpoint the engine tests build."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"
if str(ENGINE_TESTS) not in sys.path:
    sys.path.insert(0, str(ENGINE_TESTS))

from tiny_checkpoints import build_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (vocab 384, context 256) with a chat template: loads in about a second."""
    return build_checkpoint(tmp_path_factory.mktemp("local-tiny-llama"), "llama", seed=1)
