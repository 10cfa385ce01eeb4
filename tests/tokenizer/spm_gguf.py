"""Tiny SentencePiece models written into vocabulary-only GGUF files, beside SentencePiece's own processor."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.tiny_checkpoints import add_sentencepiece_vocab, train_sentencepiece

from shoal.tokenizer import Tokenizer


@dataclass(frozen=True)
class SentencePieceGGUF:
    """A SentencePiece model and our tokenizer rebuilt from the GGUF vocabulary llama.cpp's converter writes."""

    reference: Any  # sentencepiece.SentencePieceProcessor
    tokenizer: Tokenizer
    path: Path


SPM_VARIANTS = {
    "llama": {},  # Llama 2 / Mistral: byte fallback, a space prefix
    "gemma": {"add_dummy_prefix": False},  # no space prefix (tokenizer.ggml.add_space_prefix = false)
    "no-byte-fallback": {"byte_fallback": False},  # characters without a piece are <unk>
}


def write_sentencepiece_gguf(path: Path, **options: Any) -> SentencePieceGGUF:
    """A vocabulary-only GGUF (no tensors) from a SentencePiece model trained with ``options``."""
    import gguf
    import sentencepiece

    user_defined = tuple(options.get("user_defined_symbols", ()))
    model = train_sentencepiece(**options)
    writer = gguf.GGUFWriter(path, "llama")
    add_sentencepiece_vocab(
        writer, model, add_space_prefix=options.get("add_dummy_prefix", True), user_defined=user_defined
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return SentencePieceGGUF(sentencepiece.SentencePieceProcessor(model_proto=model), Tokenizer.from_gguf(path), path)
