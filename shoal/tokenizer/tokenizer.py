"""The engine's and the gateway's tokenizer: encode, decode, special tokens, chat template.

Built on the ``tokenizers`` library either from a Hugging Face directory (``tokenizer.json`` plus
``tokenizer_config.json`` for special tokens and the chat template) or from a GGUF file's metadata, so both
formats behave the same afterwards (a GGUF's SentencePiece pieces are decoded by our own decoder, as
SentencePiece decodes them). End-of-sequence ids are the union of every place a checkpoint declares
one (tokenizer config, ``generation_config.json``, GGUF eos/eot ids): chat models often stop on a token that
is not the tokenizer's nominal eos.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from shoal.gguf_metadata import read_gguf_metadata
from shoal.model_registry import ModelSource
from shoal.tokenizer.chat_template import ChatTemplateError, render_chat
from shoal.tokenizer.gguf_vocab import PieceDecoder, build_gguf_tokenizer
from shoal.tokenizer.token_bytes import TokenBytes

_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")
_GGUF_SPECIAL_KEYS = ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id")
_GGUF_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


class TokenizerFilesError(ValueError):
    """Tokenizer files are missing or unreadable; the message names the path."""


@dataclass(frozen=True)
class Tokenizer:
    backend: HFTokenizer
    special_tokens: dict[str, str]  # bos_token/eos_token/unk_token/pad_token -> text, as templates see them
    eos_token_ids: frozenset[int]
    bos_token_id: int | None = None
    chat_template: str | None = None
    piece_decoder: PieceDecoder | None = None  # decodes the pieces in place of the backend's decoder

    @staticmethod
    def from_source(source: ModelSource) -> Tokenizer:
        if source.format == "gguf":
            return Tokenizer.from_gguf(source.path)
        return Tokenizer.from_hf_dir(source.path)

    @staticmethod
    def from_hf_dir(directory: Path) -> Tokenizer:
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise TokenizerFilesError(f"no tokenizer.json in {str(directory)!r}")
        backend = HFTokenizer.from_file(str(path))
        config = _read_json(directory / "tokenizer_config.json")
        special = {name: text for name in _SPECIAL_NAMES if (text := _token_text(config.get(name)))}
        eos_ids = set(_as_ids(_read_json(directory / "generation_config.json").get("eos_token_id")))
        if "eos_token" in special and (eos := backend.token_to_id(special["eos_token"])) is not None:
            eos_ids.add(eos)
        bos = special.get("bos_token")
        return Tokenizer(
            backend=backend,
            special_tokens=special,
            eos_token_ids=frozenset(eos_ids),
            bos_token_id=backend.token_to_id(bos) if bos else None,
            chat_template=_hf_chat_template(directory, config),
        )

    @staticmethod
    def from_gguf(path: Path) -> Tokenizer:
        metadata = read_gguf_metadata(path)
        tokens: list[str] = metadata.get("tokenizer.ggml.tokens") or []
        ids = {
            name: metadata.get(f"tokenizer.ggml.{key}")
            for name, key in zip(_SPECIAL_NAMES, _GGUF_SPECIAL_KEYS, strict=True)
        }
        backend, piece_decoder = build_gguf_tokenizer(metadata)
        return Tokenizer(
            backend=backend,
            special_tokens={name: tokens[i] for name, i in ids.items() if i is not None and i < len(tokens)},
            eos_token_ids=frozenset(metadata[k] for k in _GGUF_EOS_KEYS if k in metadata),
            bos_token_id=ids["bos_token"],
            chat_template=metadata.get("tokenizer.chat_template"),
            piece_decoder=piece_decoder,
        )

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer knows, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        if self.piece_decoder is None:
            return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        skipped = self._special_ids if skip_special_tokens else frozenset()
        pieces = (self.backend.id_to_token(i) for i in ids if i not in skipped)
        return self.piece_decoder([piece for piece in pieces if piece is not None])  # None: past the vocabulary

    @cached_property
    def token_bytes(self) -> TokenBytes | None:
        """Each token's bytes, where the decoder is byte-level (a stream then decodes a token at a time)."""
        return None if self.piece_decoder is not None else TokenBytes.of(self.backend, self._special_ids)

    @cached_property
    def _special_ids(self) -> frozenset[int]:
        return frozenset(i for i, token in self.backend.get_added_tokens_decoder().items() if token.special)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **variables: Any
    ) -> str:
        """The prompt text for a conversation; ``variables`` (e.g. ``tools``) are passed to the template."""
        if self.chat_template is None:
            raise ChatTemplateError("this model has no chat_template; send a plain completion prompt instead")
        return render_chat(self.chat_template, messages, add_generation_prompt, **self.special_tokens, **variables)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TokenizerFilesError(f"cannot read {str(path)!r}: {exc}") from exc


def _token_text(value: Any) -> str | None:
    """Special tokens are written either as text or as a serialised ``AddedToken`` dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _hf_chat_template(directory: Path, config: dict[str, Any]) -> str | None:
    """``chat_template.jinja`` (transformers 5) wins over ``tokenizer_config.json``'s entry (a str or named list)."""
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text()
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template}
        return named.get("default")
    return template
