"""The bytes each token of a byte-level vocabulary spells, so a stream decodes a token at a time.

A byte-level BPE vocabulary (GPT-2's scheme; Llama 3, Qwen, SmolLM) writes every byte as one printable
character, and its decoder (``tokenizers.decoders.ByteLevel``) maps each token's characters back to bytes,
whatever its neighbours, then decodes the joined bytes as UTF-8 with replacement. A token's bytes are therefore a
function of the token alone, and a stream's text is an incremental UTF-8 decode of its tokens' bytes: a lookup
and a codec call per token instead of two decodes of a window through the tokenizer. The rules copied from the
decoder: a token with a character outside the byte alphabet (an added token such as ``"<x> y"``) is spelled as
its own UTF-8 text; an id past the vocabulary spells nothing; with ``skip_special_tokens`` a special added token
spells nothing. ``tests/tokenizer/test_token_bytes.py`` holds them to ``tokenizers``' decode.
"""

from __future__ import annotations

from functools import cache

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders


@cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte alphabet, inverted: the printable bytes stand for themselves, the rest for code points 256+."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    chars = {chr(b): b for b in printable}
    chars.update({chr(256 + n): b for n, b in enumerate(others)})
    return chars


class TokenBytes:
    """Each token's bytes, spelled on first use and kept (a stream meets a small part of a large vocabulary)."""

    def __init__(self, backend: HFTokenizer, special_ids: frozenset[int]) -> None:
        self._backend = backend
        self._special_ids = special_ids
        self._kept: dict[int, bytes] = {}  # special tokens spelled out
        self._skipped: dict[int, bytes] = {}  # special tokens spelled as nothing

    @staticmethod
    def of(backend: HFTokenizer, special_ids: frozenset[int]) -> TokenBytes | None:
        """The table for a byte-level decoder; None for any other (their tokens' text depends on neighbours)."""
        return TokenBytes(backend, special_ids) if isinstance(backend.decoder, decoders.ByteLevel) else None

    def spell(self, token_id: int, skip_special_tokens: bool) -> bytes:
        cache = self._skipped if skip_special_tokens else self._kept
        spelled = cache.get(token_id)
        if spelled is None:
            if skip_special_tokens and token_id in self._special_ids:
                spelled = b""
            else:
                spelled = _spell(self._backend.id_to_token(token_id))
            cache[token_id] = spelled
        return spelled


def _spell(token: str | None) -> bytes:
    if token is None:  # past the vocabulary: the decoder skips it
        return b""
    byte_of = _byte_of_char()
    try:
        return bytes([byte_of[c] for c in token])
    except KeyError:
        return token.encode()
