"""Local-mode fixtures: manifests written on the fly and the tiny random checkpoint the engine tests build."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"
if str(ENGINE_TESTS) not in sys.path:
    sys.path.insert(0, str(ENGINE_TESTS))

from tiny_checkpoints import build_checkpoint  # noqa: E402


def manifest(source: str, **spec: Any) -> dict[str, Any]:
    """An InferenceDeployment for ``source``; ``spec`` entries replace whole top-level spec blocks."""
    return {"apiVersion": "shoal.dev/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": "local-test"},
            "spec": {"model": {"source": source}, **spec}}


def write_manifest(directory: Path, document: dict[str, Any], name: str = "fleet.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (vocab 384, context 256) with a chat template: loads in about a second."""
    return build_checkpoint(tmp_path_factory.mktemp("local-tiny-llama"), "llama", seed=1)
