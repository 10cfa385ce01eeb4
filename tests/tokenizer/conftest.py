"""Tokenizer fixtures: ours and transformers' on the bundled SmolLM2 GGUF and on a tiny trained BPE tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine.tiny_checkpoints import GEMMA_CHAT_TEMPLATE, save_tokenizer, train_tokenizer

from shoal.model_registry import resolve_model
from shoal.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tokenizer.json + tokenizer_config.json (special tokens, ChatML template) of a 384-token byte-level BPE."""
    directory = tmp_path_factory.mktemp("tiny-tokenizer")
    save_tokenizer(train_tokenizer(vocab_size=384), directory)
    (directory / "generation_config.json").write_text('{"eos_token_id": [0, 2]}')
    return directory


@pytest.fixture(scope="session")
def gemma_template_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny tokenizer with Gemma 3's chat template (the tiny Gemma checkpoints' files)."""
    directory = tmp_path_factory.mktemp("gemma-template")
    save_tokenizer(train_tokenizer(vocab_size=384), directory, GEMMA_CHAT_TEMPLATE)
    return directory


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir: Path) -> Tokenizer:
    return Tokenizer.from_hf_dir(tiny_tokenizer_dir)


@pytest.fixture(scope="session")
def tiny_hf_tokenizer(tiny_tokenizer_dir: Path):
    import transformers

    return transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Tokenizer:
    return Tokenizer.from_source(resolve_model("smollm2-135m"))


@pytest.fixture(scope="session")
def smollm2_hf_tokenizer():
    """transformers' tokenizer rebuilt from the same GGUF metadata (about 9 s)."""
    import transformers

    source = resolve_model("smollm2-135m")
    return transformers.AutoTokenizer.from_pretrained(source.path.parent, gguf_file=source.path.name)
