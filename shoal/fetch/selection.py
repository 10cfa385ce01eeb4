"""Which files of a Hugging Face directory serving needs (pure): config, tokenizer, chat template, safetensors;
for a PEFT LoRA adapter's directory (``adapter_config.json``, no ``config.json``), its config and weights.

The weights are the shards the ``model.safetensors.index.json`` lists when there is one (a repo may also carry a
``consolidated.safetensors`` copy of the same weights, as Mistral's do), else every top-level ``*.safetensors``,
as the loader reads them. PyTorch ``.bin`` files, ONNX exports, READMEs and subfolders are never fetched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shoal.fetch.errors import FetchError

CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
INDEX_FILE = "model.safetensors.index.json"
ADAPTER_CONFIG = "adapter_config.json"


def metadata_files(names: Iterable[str], source: str) -> list[str]:
    """The config and tokenizer files present (``config.json`` must be), plus the weights index if any."""
    present = set(names)
    if "config.json" not in present and ADAPTER_CONFIG in present:  # a LoRA adapter: its weights follow as a model's
        return [ADAPTER_CONFIG]
    if "config.json" not in present:
        ggufs = sorted(n for n in present if n.endswith(".gguf"))
        hint = f"; to serve one of its GGUF files name it: {source}/{ggufs[0]}" if ggufs else ""
        raise FetchError(f"{source} has no config.json, so it is not a Hugging Face model directory{hint}")
    wanted = [*CONFIG_FILES, *TOKENIZER_FILES, INDEX_FILE]
    return [name for name in wanted if name in present]


def weight_files(names: Iterable[str], index: Mapping[str, Any] | None, source: str) -> list[str]:
    """The safetensors shards to fetch: those the index maps tensors to, else every top-level one."""
    present = set(names)
    if index is not None:
        shards = sorted(set(index.get("weight_map", {}).values()))
        missing = [shard for shard in shards if shard not in present]
        if not shards or missing:
            raise FetchError(f"{source}: {INDEX_FILE} lists shards the repo does not have: {missing or 'none'}")
        return shards
    shards = sorted(n for n in present if n.endswith(".safetensors") and "/" not in n)
    if not shards:
        others = sorted(n for n in present if n.endswith((".bin", ".pt", ".pth", ".gguf")))
        found = f" (it has {', '.join(others[:5])}; only safetensors are loaded)" if others else ""
        raise FetchError(f"{source} has no *.safetensors weights{found}")
    return shards
