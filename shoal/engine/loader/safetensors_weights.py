"""Streams the tensors of a Hugging Face directory (one ``model.safetensors`` or an index of shards)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from shoal.engine.loader.errors import WeightsError

INDEX_FILE = "model.safetensors.index.json"


def shard_files(directory: Path) -> list[Path]:
    """The shards the index lists (each must exist), or every ``*.safetensors`` file in the directory."""
    index = directory / INDEX_FILE
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        paths = [directory / name for name in shards]
        for path in paths:
            if not path.is_file():
                raise WeightsError(f"{str(index)!r} lists shard {str(path)!r}, which does not exist")
        return paths
    paths = sorted(directory.glob("*.safetensors"))
    if not paths:
        raise WeightsError(f"no *.safetensors weights in {str(directory)!r}")
    return paths


def iter_safetensors(directory: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs with Hugging Face names, shard by shard."""
    for path in shard_files(directory):
        try:
            with safe_open(path, framework="pt") as shard:
                for name in shard.keys():  # noqa: SIM118 - safe_open is not iterable, only its keys()
                    yield name, shard.get_tensor(name)
        except OSError as exc:
            raise WeightsError(f"cannot read {str(path)!r}: {exc}") from exc
