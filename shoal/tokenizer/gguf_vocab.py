"""Rebuilds a ``tokenizers`` tokenizer from a GGUF file's ``tokenizer.ggml.*`` metadata.

A GGUF carries no ``tokenizer.json``: only the vocabulary, the merges or scores, token types and special ids.
For a byte-level BPE vocabulary (``tokenizer.ggml.model = gpt2``) that is enough to rebuild the original
tokenizer, provided the text is split into words the way the merges were learned; ``tokenizer.ggml.pre`` names
that split (llama.cpp's names). SmolLM's tokenizer splits digits one by one before the GPT-2 byte-level regex.
A SentencePiece vocabulary (``llama``: Llama 2, Mistral) has scores instead of merges and no word
split; ``sentencepiece_vocab`` rebuilds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from shoal.tokenizer.sentencepiece_vocab import CONTROL, NORMAL, UNKNOWN, USER_DEFINED, build_sentencepiece_tokenizer

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class UnsupportedTokenizerError(ValueError):
    """The GGUF describes a tokenizer we cannot rebuild; the message names the metadata field."""


LLAMA3_PRE = ("llama3", "llama-v3", "llama-bpe", "smaug-bpe")
QWEN2_PRE = ("qwen2", "deepseek-r1-qwen")
KNOWN_PRE = ("smollm", *LLAMA3_PRE, *QWEN2_PRE, "gpt2", "default")
SUPPORTED_MODELS = {"gpt2": "byte-level BPE", "llama": "SentencePiece BPE"}  # tokenizer.ggml.model
PieceDecoder = Callable[[list[str]], str]


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


def build_gguf_tokenizer(metadata: dict[str, Any]) -> tuple[HFTokenizer, PieceDecoder | None]:
    """A tokenizer equivalent to the one the GGUF was converted from, adding BOS/EOS as the file says, and the
    decoder of its pieces where the tokenizer's own would not decode as the original does (SentencePiece's)."""
    kind = metadata.get("tokenizer.ggml.model")
    piece_decoder: PieceDecoder | None = None
    if kind == "gpt2":
        tokenizer = _byte_level_tokenizer(metadata)
    elif kind == "llama":
        tokenizer, piece_decoder = _sentencepiece_tokenizer(metadata)
    else:
        supported = ", ".join(f"{name!r} ({what})" for name, what in SUPPORTED_MODELS.items())
        raise UnsupportedTokenizerError(f"tokenizer.ggml.model={kind!r} is not supported (supported: {supported})")
    # llama.cpp adds BOS to a SentencePiece vocabulary whose file does not say otherwise
    if (processor := _bos_eos_processor(metadata, add_bos_default=kind == "llama")) is not None:
        tokenizer.post_processor = processor
    return tokenizer, piece_decoder


def _byte_level_tokenizer(metadata: dict[str, Any]) -> HFTokenizer:
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
            if kind == CONTROL and set(token) <= alphabet
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(token, special=False, normalized=False)
            for token, kind in zip(tokens, types, strict=False)
            if kind == USER_DEFINED
        ]
    )
    return tokenizer


def _sentencepiece_tokenizer(metadata: dict[str, Any]) -> tuple[HFTokenizer, PieceDecoder]:
    """The metadata a SentencePiece vocabulary needs, checked; missing token types are normal, as llama.cpp reads
    them."""
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    scores: list[float] = metadata.get("tokenizer.ggml.scores") or []
    types: list[int] = metadata.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    for field, values in (("scores", scores), ("token_type", types)):
        if len(values) != len(tokens):
            raise UnsupportedTokenizerError(
                f"tokenizer.ggml.{field}: {len(values)} values for {len(tokens)} tokens; a SentencePiece "
                "vocabulary ('llama') needs one per token (its pieces merge by score)"
            )
    if metadata.get("tokenizer.ggml.remove_extra_whitespaces"):
        raise UnsupportedTokenizerError(
            "tokenizer.ggml.remove_extra_whitespaces=True is not supported: a SentencePiece vocabulary ('llama') "
            "is read with its spaces kept, as llama.cpp reads it"
        )
    unk_id = metadata.get("tokenizer.ggml.unknown_token_id")
    if unk_id is None:
        unk_id = next((index for index, kind in enumerate(types) if kind == UNKNOWN), None)
    elif not 0 <= unk_id < len(tokens):
        raise UnsupportedTokenizerError(
            f"tokenizer.ggml.unknown_token_id={unk_id} is outside the vocabulary of {len(tokens)} tokens"
        )
    return build_sentencepiece_tokenizer(
        tokens, scores, types, unk_id, add_space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    )


def _bos_eos_processor(metadata: dict[str, Any], add_bos_default: bool) -> processors.PostProcessor | None:
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    eos_id = metadata.get("tokenizer.ggml.eos_token_id")
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", add_bos_default)) and bos_id is not None
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token")) and eos_id is not None
    if not (add_bos or add_eos):
        return None
    bos = tokens[bos_id] if add_bos and bos_id is not None else None
    eos = tokens[eos_id] if add_eos and eos_id is not None else None
    single = " ".join(p for p in (bos and f"{bos}:0", "$A:0", eos and f"{eos}:0") if p)
    pair = " ".join(p for p in (single, bos and f"{bos}:1", "$B:1", eos and f"{eos}:1") if p)
    specials = [(t, tokens.index(t)) for t in dict.fromkeys(t for t in (bos, eos) if t)]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)
