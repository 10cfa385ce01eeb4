"""Tokenizer fixtures: ours and transformers' on the bundled SmolLM2 GGUF and on a tiny trained BPE tokenizer;
ours and SentencePiece's own on tiny SentencePiece models written into GGUF files."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"
if str(ENGINE_TESTS) not in sys.path:
    sys.path.insert(0, str(ENGINE_TESTS))

from spm_gguf import SPM_VARIANTS, SentencePieceGGUF, write_sentencepiece_gguf  # noqa: E402
from tiny_checkpoints import GEMMA_CHAT_TEMPLATE, save_tokenizer, train_tokenizer  # noqa: E402

from shoal.model_registry import resolve_model  # noqa: E402
from shoal.tokenizer import Tokenizer  # noqa: E402


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


@pytest.fixture(scope="session", params=list(SPM_VARIANTS))
def spm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentencePieceGGUF]:
    path = tmp_path_factory.mktemp("spm") / f"{request.param}.gguf"
    spm = write_sentencepiece_gguf(path, **SPM_VARIANTS[request.param])
    yield spm
    spm.reference.close()


@pytest.fixture(scope="session")
def llama_spm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentencePieceGGUF]:
    """Llama 2's kind of vocabulary, with two user-defined pieces (as an added_tokens.json gives)."""
    spm = write_sentencepiece_gguf(
        tmp_path_factory.mktemp("spm") / "llama.gguf", user_defined_symbols=["<tool>", "</tool>"]
    )
    yield spm
    spm.reference.close()
