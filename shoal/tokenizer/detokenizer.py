"""Streaming detokenization that never emits half a character.

``detokenizer_for`` picks one of two ways. A byte-level vocabulary (``Tokenizer.token_bytes``) decodes each token
alone: its bytes go through an incremental UTF-8 decoder, which holds a character's first bytes until its last
one arrives (``ByteLevelDetokenizer``). Any other decoder may read a token by its neighbours (SentencePiece drops
the first "▁" of a text), so, following vLLM, ``WindowDetokenizer`` decodes a short window twice: from
``prefix_offset`` up to ``read_offset`` (text already emitted) and from ``prefix_offset`` to the end; the
difference is the new text. While the window's text ends in U+FFFD (an incomplete character), nothing is emitted
and the offsets stay put, so the character comes out whole once its last byte arrives. This needs a decode of
more tokens to extend the decode of fewer, apart from a trailing U+FFFD: true of SentencePiece vocabularies
through their own decoder (``sentencepiece_vocab``), whose first "▁" is dropped in both decodes alike. Either
way ``flush`` releases whatever is still held at the end of a stream.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence
from typing import Protocol

from shoal.tokenizer.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"
_PROMPT_CONTEXT = 5  # prompt tokens decoded ahead of the first generated one: a context, or an unfinished character


class Detokenizer(Protocol):
    def push(self, token_ids: Iterable[int]) -> str:
        """Appends tokens; returns the text they completed (possibly empty)."""
        ...

    def flush(self) -> str:
        """The text still held back (an incomplete character at the end of the stream decodes as U+FFFD)."""
        ...


def detokenizer_for(
    tokenizer: Tokenizer, skip_special_tokens: bool = True, prompt_token_ids: Sequence[int] = ()
) -> Detokenizer:
    """A stream's detokenizer: a token at a time where the vocabulary is byte-level, by windows elsewhere."""
    if tokenizer.token_bytes is not None:
        return ByteLevelDetokenizer(tokenizer, skip_special_tokens, prompt_token_ids)
    return WindowDetokenizer(tokenizer, skip_special_tokens, prompt_token_ids)


class ByteLevelDetokenizer:
    """Each token's bytes through one incremental UTF-8 decoder, which holds a character's first bytes until its
    last arrives. A run of U+FFFD at the end (bytes that are no character) waits for a later character or the
    flush, so a stream cut short by a stop token ends on its last real character. The prompt's last tokens go
    through the decoder first, their text dropped; a character the prompt began (a prompt given as ids can stop
    inside one) is the prompt's, as with the windows: the output's text starts after the characters the prompt's
    text shows for those bytes, whether the output's bytes finish them or not."""

    def __init__(
        self, tokenizer: Tokenizer, skip_special_tokens: bool = True, prompt_token_ids: Sequence[int] = ()
    ) -> None:
        token_bytes = tokenizer.token_bytes
        assert token_bytes is not None, "a byte-level vocabulary"
        self._spell = token_bytes.spell
        self._skip_special_tokens = skip_special_tokens
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._utf8.decode(b"".join(self._spell(i, skip_special_tokens) for i in prompt_token_ids[-_PROMPT_CONTEXT:]))
        waiting: bytes = self._utf8.getstate()[0]  # the prompt's last bytes, if they are no whole character yet
        self._prompt_characters = len(waiting.decode("utf-8", "replace"))  # what the prompt's text shows for them
        self._held = ""

    def push(self, token_ids: Iterable[int]) -> str:
        spell, skip = self._spell, self._skip_special_tokens
        text = self._held + self._decode(b"".join([spell(i, skip) for i in token_ids]))
        emitted = text.rstrip(_REPLACEMENT)
        self._held = text[len(emitted) :]
        return emitted

    def flush(self) -> str:
        text, self._held = self._held + self._decode(b"", final=True), ""
        return text

    def _decode(self, data: bytes, final: bool = False) -> str:
        text = self._utf8.decode(data, final)
        if self._prompt_characters and text:  # the first characters decoded are those the prompt's text ends with
            dropped = min(self._prompt_characters, len(text))
            text, self._prompt_characters = text[dropped:], self._prompt_characters - dropped
        return text


class WindowDetokenizer:
    def __init__(
        self, tokenizer: Tokenizer, skip_special_tokens: bool = True, prompt_token_ids: Iterable[int] = ()
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._ids: list[int] = list(prompt_token_ids)
        self._read_offset = len(self._ids)
        self._prefix_offset = max(self._read_offset - _PROMPT_CONTEXT, 0)

    def push(self, token_ids: Iterable[int]) -> str:
        self._ids.extend(token_ids)
        prefix_text, new_text = self._window_texts()
        if len(new_text) <= len(prefix_text) or new_text.endswith(_REPLACEMENT):
            return ""
        return self._advance(prefix_text, new_text)

    def flush(self) -> str:
        prefix_text, new_text = self._window_texts()
        if len(new_text) <= len(prefix_text):
            return ""
        return self._advance(prefix_text, new_text)

    def _window_texts(self) -> tuple[str, str]:
        window = self._ids[self._prefix_offset :]
        split = self._read_offset - self._prefix_offset
        decode = self._tokenizer.decode
        return decode(window[:split], self._skip_special_tokens), decode(window, self._skip_special_tokens)

    def _advance(self, prefix_text: str, new_text: str) -> str:
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return new_text[len(prefix_text) :]
