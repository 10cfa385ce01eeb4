"""Tiny SentencePiece models written into vocabulary-only GGUF files, beside SentencePiece itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentencepiece_reference import SentencePieceReference
from tiny_checkpoints import add_sentencepiece_vocab, train_sentencepiece

from shoal.tokenizer import Tokenizer


@dataclass(frozen=True)
class SentencePieceGGUF:
    """SentencePiece (in its child process) and our tokenizer rebuilt from the GGUF vocabulary llama.cpp's
    converter writes for its model."""

    reference: SentencePieceReference
    tokenizer: Tokenizer
    path: Path


SPM_VARIANTS: dict[str, dict[str, Any]] = {
    "llama": {},  # Llama 2 / Mistral: byte fallback, a space prefix
    "gemma": {"add_dummy_prefix": False},  # no space prefix (tokenizer.ggml.add_space_prefix = false)
    "no-byte-fallback": {"byte_fallback": False},  # characters without a piece are <unk>
}


def write_sentencepiece_gguf(path: Path, **options: Any) -> SentencePieceGGUF:
    """A vocabulary-only GGUF (no tensors) for a SentencePiece model trained with ``options``."""
    import gguf

    reference = train_sentencepiece(**options)
    writer = gguf.GGUFWriter(path, "llama")
    add_sentencepiece_vocab(writer, reference)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return SentencePieceGGUF(reference, Tokenizer.from_gguf(path), path)
