"""Streaming detokenization that never emits half a character.

A byte-level token can end in the middle of a UTF-8 sequence, and some decoders treat a sequence's first token
specially (dropping a leading space), so decoding each new token alone is wrong. Following vLLM, we decode a
short window twice: from ``prefix_offset`` up to ``read_offset`` (text already emitted) and from
``prefix_offset`` to the end; the difference is the new text. While the window's text ends in U+FFFD (an
incomplete character), nothing is emitted and the offsets stay put, so the character comes out whole once its
last byte arrives. ``flush`` releases whatever is still held at the end of a stream. This needs a decode of
more tokens to extend the decode of fewer, apart from a trailing U+FFFD: true of byte-level vocabularies, and
of SentencePiece ones through their own decoder (``sentencepiece_vocab``), whose first "▁" is dropped in
both decodes alike.
"""

from __future__ import annotations

from collections.abc import Iterable

from shoal.tokenizer.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"
_PROMPT_CONTEXT = 5  # prompt tokens decoded ahead of the first generated one, for context-sensitive decoders


class IncrementalDetokenizer:
    def __init__(
        self, tokenizer: Tokenizer, skip_special_tokens: bool = True, prompt_token_ids: Iterable[int] = ()
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._ids: list[int] = list(prompt_token_ids)
        self._read_offset = len(self._ids)
        self._prefix_offset = max(self._read_offset - _PROMPT_CONTEXT, 0)

    def push(self, token_ids: Iterable[int]) -> str:
        """Appends tokens; returns the text they completed (possibly empty)."""
        self._ids.extend(token_ids)
        prefix_text, new_text = self._window_texts()
        if len(new_text) <= len(prefix_text) or new_text.endswith(_REPLACEMENT):
            return ""
        return self._advance(prefix_text, new_text)

    def flush(self) -> str:
        """The text still held back (an incomplete character at the end of the stream decodes as U+FFFD)."""
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
