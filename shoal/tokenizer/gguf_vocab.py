"""Rebuilds a ``tokenizers`` tokenizer from a GGUF file's ``tokenizer.ggml.*`` metadata.

A GGUF carries no ``tokenizer.json``: only the vocabulary, the merges, token types and special ids. For a
byte-level BPE vocabulary (``tokenizer.ggml.model = gpt2``) that is enough to rebuild the original tokenizer,
provided the text is split into words the way the merges were learned; ``tokenizer.ggml.pre`` names that
split (llama.cpp's names). SmolLM's tokenizer splits digits one by one before the GPT-2 byte-level regex.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types


class UnsupportedTokenizerError(ValueError):
    """The GGUF describes a tokenizer we cannot rebuild; the message names the metadata field."""


LLAMA3_PRE = ("llama3", "llama-v3", "llama-bpe", "smaug-bpe")
QWEN2_PRE = ("qwen2", "deepseek-r1-qwen")
KNOWN_PRE = ("smollm", *LLAMA3_PRE, *QWEN2_PRE, "gpt2", "default")


def _pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    """The word split ``tokenizer.ggml.pre`` names; an unknown name is refused, since GPT-2's split in its place
    would tokenize differently from the model's training (silently wrong ids, not an error)."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre not in (*KNOWN_PRE, None):
        raise UnsupportedTokenizerError(
            f"tokenizer.ggml.pre={pre!r} is not supported (supported: {', '.join(KNOWN_PRE)}): its word split "
            "is unknown, and another would give other token ids"
        )
    if pre == "smollm":
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    if pre in ("llama3", "llama-v3", "llama-bpe", "smaug-bpe"):
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"), byte_level])
    if pre in ("qwen2", "deepseek-r1-qwen"):
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated"), byte_level])
    return pre_tokenizers.ByteLevel(add_prefix_space=False)  # "gpt2", "default" or none given: GPT-2's split


def _byte_alphabet() -> set[str]:
    return set(pre_tokenizers.ByteLevel.alphabet())


def build_gguf_tokenizer(metadata: dict[str, Any]) -> HFTokenizer:
    """A byte-level BPE tokenizer equivalent to the one the GGUF was converted from."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedTokenizerError(f"tokenizer.ggml.model={kind!r} is not supported (only byte-level BPE 'gpt2')")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in metadata.get("tokenizer.ggml.merges", [])]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(metadata.get("tokenizer.ggml.pre"))
    tokenizer.decoder = decoders.ByteLevel()

    # Control tokens (<|im_start|>...) must match whole and count as special; a "control" token spelled outside
    # the byte alphabet is a converter mislabel and is left alone, as transformers does.
    alphabet = _byte_alphabet()
    types = metadata.get("tokenizer.ggml.token_type") or []
    tokenizer.add_special_tokens(
        [
            AddedToken(token, special=True, normalized=False)
            for token, kind in zip(tokens, types, strict=False)
            if kind == _CONTROL and set(token) <= alphabet
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(token, special=False, normalized=False)
            for token, kind in zip(tokens, types, strict=False)
            if kind == _USER_DEFINED
        ]
    )

    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    eos_id = metadata.get("tokenizer.ggml.eos_token_id")
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token")) and bos_id is not None
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token")) and eos_id is not None
    if add_bos or add_eos:
        bos = tokens[bos_id] if add_bos and bos_id is not None else None
        eos = tokens[eos_id] if add_eos and eos_id is not None else None
        single = " ".join(p for p in (bos and f"{bos}:0", "$A:0", eos and f"{eos}:0") if p)
        pair = " ".join(p for p in (single, bos and f"{bos}:1", "$B:1", eos and f"{eos}:1") if p)
        specials = [(t, tokens.index(t)) for t in dict.fromkeys(t for t in (bos, eos) if t)]
        tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)
    return tokenizer
