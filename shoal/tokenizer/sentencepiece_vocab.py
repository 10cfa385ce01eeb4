"""A GGUF's SentencePiece vocabulary (``tokenizer.ggml.model = llama``: Llama 2, Mistral) as a ``tokenizers``
tokenizer that gives SentencePiece's token ids and text.

SentencePiece's BPE (llama.cpp's "llama" vocabulary type) encodes by score: starting from single characters, it
merges the adjacent pair whose concatenation is the highest-scoring piece in the vocabulary, again and again; a
character the vocabulary lacks is spelled as its UTF-8 bytes, ``<0xE2><0x82><0xAC>`` (byte fallback), or as
``<unk>`` where the vocabulary has no byte tokens. ``tokenizers``' BPE merges by rank instead, so every piece
is listed as a merge of each pair of pieces that spells it, best score first: the same merges in the same
order. Spaces are spelled "▁", and one "▁" is prepended to each run of text as llama.cpp does (unless the file
says ``add_space_prefix = false``, as Gemma's do): at the start and after each control or user-defined token
matched in the text, as Meta's and Mistral's own code tokenize ``<s>[INST]`` (BOS, then the turn encoded
alone). Each run gets exactly SentencePiece's ids.

Decoding (``SentencePieceDecoder``, ours rather than a ``tokenizers`` decoder) undoes the spelling and drops
the first piece's prefix "▁". Byte tokens decode as SentencePiece decodes them: a byte that is not part of a
whole UTF-8 character becomes one U+FFFD. ``tokenizers``' byte-fallback decoder replaces a whole run of bytes
once any byte in it is wrong, so a text could change before its end as tokens are added, and the incremental
detokenizer needs each decode to extend the previous one; a Python decoder inside a ``tokenizers`` tokenizer
would make it unprintable and unserializable.
"""

from __future__ import annotations

import codecs
import re

from tokenizers import AddedToken, models, normalizers
from tokenizers import Tokenizer as HFTokenizer

# llama.cpp's token types (tokenizer.ggml.token_type), for SentencePiece and byte-level vocabularies alike
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # "▁", SentencePiece's spelling of a space
_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")  # SentencePiece's spelling, which tokenizers' byte fallback looks up
_PER_BYTE = "shoal.sentencepiece-per-byte"


def _replace_each_byte(error: UnicodeError) -> tuple[str, int]:
    """One U+FFFD for each byte of a broken sequence (Python's "replace" gives one per sequence)."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return "\ufffd", error.start + 1


codecs.register_error(_PER_BYTE, _replace_each_byte)


def build_sentencepiece_tokenizer(
    tokens: list[str], scores: list[float], types: list[int], unk_id: int | None, add_space_prefix: bool
) -> tuple[HFTokenizer, SentencePieceDecoder]:
    """The encoder and the decoder SentencePiece is with these pieces, scores and (llama.cpp's) token types."""
    byte_values = {  # NORMAL too: a file without token types has every piece read as normal
        token: int(match.group(1), 16)
        for token, kind in zip(tokens, types, strict=True)
        if kind in (BYTE, NORMAL) and (match := _BYTE_PIECE.fullmatch(token))
    }
    model = models.BPE(
        vocab={token: index for index, token in enumerate(tokens)},
        merges=score_ordered_merges(tokens, scores, types),
        unk_token=tokens[unk_id] if unk_id is not None else None,
        fuse_unk=True,  # SentencePiece writes a run of unknown characters as one <unk>
        byte_fallback=True,  # a character with no piece is spelled in byte tokens, or <unk> where some lack
    )
    tokenizer = HFTokenizer(model)
    spelling = [normalizers.Replace(" ", SPACE)]
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend(SPACE), *spelling] if add_space_prefix else spelling
    )
    tokenizer.add_special_tokens(
        [
            AddedToken(token, special=True, normalized=False)
            for token, kind in zip(tokens, types, strict=True)
            if kind in (CONTROL, UNKNOWN)
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(token, special=False, normalized=False)
            for token, kind in zip(tokens, types, strict=True)
            if kind == USER_DEFINED
        ]
    )
    return tokenizer, SentencePieceDecoder(byte_values, add_space_prefix)


def score_ordered_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """Every way of spelling each mergeable piece as two mergeable pieces, the highest-scoring piece first.
    Unused pieces are left out: SentencePiece never gives them.

    A piece spelled two ways gets its shorter-left spelling first; which one comes first matters only when
    both pairs are next to each other in a word, where SentencePiece takes the leftmost.
    """
    mergeable = {
        token: index
        for index, (token, kind) in enumerate(zip(tokens, types, strict=True))
        if kind in (NORMAL, USER_DEFINED)
    }
    ranked: list[tuple[float, int, int, str, str]] = []
    for piece, index in mergeable.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                ranked.append((-scores[index], index, cut, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


class SentencePieceDecoder:
    """Pieces to text as SentencePiece writes them."""

    def __init__(self, byte_values: dict[str, int], strip_first_space: bool) -> None:
        self._byte_values = byte_values
        self._strip_first_space = strip_first_space

    def __call__(self, pieces: list[str]) -> str:
        text = bytearray()
        for position, piece in enumerate(pieces):
            byte = self._byte_values.get(piece)
            if byte is not None:
                text.append(byte)
                continue
            if position == 0 and self._strip_first_space and piece.startswith(SPACE):
                piece = piece[1:]
            text += piece.replace(SPACE, " ").encode()
        return text.decode("utf-8", _PER_BYTE)
