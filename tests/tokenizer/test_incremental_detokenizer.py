"""Streaming detokenization: the pieces add up to the full decode and never contain a broken character."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spm_gguf import SentencePieceGGUF

from shoal.tokenizer import Tokenizer, detokenizer_for
from shoal.tokenizer.detokenizer import ByteLevelDetokenizer, Detokenizer, WindowDetokenizer

# Multi-byte characters that byte-level BPE cuts mid-sequence: emoji (incl. ZWJ sequences), CJK, accents.
COMMON_MULTIBYTE = st.sampled_from(list("aé€漢字東京🐟🌊🚀👩‍👧 \n"))
MULTIBYTE = st.text(COMMON_MULTIBYTE | st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)
# SmolLM's vocabulary lacks a few byte tokens (those of rare 4-byte characters), so not every text survives it.
SMOLLM_ENCODABLE = st.text(COMMON_MULTIBYTE, min_size=1, max_size=40)


def stream(
    tokenizer: Tokenizer,
    ids: list[int],
    sizes: list[int],
    skip: bool,
    prompt: list[int] = (),
    kind: type[ByteLevelDetokenizer | WindowDetokenizer] | None = None,
) -> list[str]:
    """Pushes ``ids`` in groups of ``sizes`` (cycled); returns every piece emitted, the flushed rest last.
    ``kind`` forces one way of detokenizing; by default the tokenizer's own (``detokenizer_for``)."""
    make = detokenizer_for if kind is None else kind
    detok: Detokenizer = make(tokenizer, skip, prompt)
    pieces, start, i = [], 0, 0
    while start < len(ids):
        size = sizes[i % len(sizes)]
        pieces.append(detok.push(ids[start : start + size]))
        start, i = start + size, i + 1
    pieces.append(detok.flush())
    return pieces


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(st.integers(0, 383), max_size=50),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    skip=st.booleans(),
)
def test_pieces_of_any_id_sequence_add_up_to_the_full_decode(
    ids: list[int], sizes: list[int], skip: bool, tiny_tokenizer: Tokenizer
) -> None:
    """Random ids include special tokens and lone bytes that never form valid UTF-8."""
    assert "".join(stream(tiny_tokenizer, ids, sizes, skip)) == tiny_tokenizer.decode(ids, skip_special_tokens=skip)


@settings(max_examples=300, deadline=None)
@given(text=MULTIBYTE, sizes=st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_streamed_text_never_contains_a_broken_character(
    text: str, sizes: list[int], tiny_tokenizer: Tokenizer
) -> None:
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    pieces = stream(tiny_tokenizer, ids, sizes, skip=True)
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)


def test_a_character_split_over_tokens_comes_out_whole(tiny_tokenizer: Tokenizer) -> None:
    ids = tiny_tokenizer.encode("🐟", add_special_tokens=False)
    assert len(ids) > 1  # the 4-byte emoji is spelled in several byte tokens
    for detok in (detokenizer_for(tiny_tokenizer), WindowDetokenizer(tiny_tokenizer)):
        assert [detok.push([i]) for i in ids] == [""] * (len(ids) - 1) + ["🐟"]


def test_a_byte_level_vocabulary_decodes_token_by_token_and_sentencepiece_by_windows(
    tiny_tokenizer: Tokenizer, spm: SentencePieceGGUF
) -> None:
    assert isinstance(detokenizer_for(tiny_tokenizer), ByteLevelDetokenizer)
    assert isinstance(detokenizer_for(spm.tokenizer), WindowDetokenizer)


@settings(max_examples=500, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 400), max_size=8),
    ids=st.lists(st.integers(0, 400), max_size=50),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    skip=st.booleans(),
)
def test_both_ways_stream_the_same_text_from_a_byte_level_vocabulary(
    prompt: list[int], ids: list[int], sizes: list[int], skip: bool, tiny_tokenizer: Tokenizer
) -> None:
    """Any ids (special, lone bytes, past the vocabulary) after any prompt, one that stops inside a character
    too: the token-at-a-time decode streams the windows' text (in pieces as early or earlier)."""
    window = stream(tiny_tokenizer, ids, sizes, skip, prompt, WindowDetokenizer)
    assert "".join(stream(tiny_tokenizer, ids, sizes, skip, prompt, ByteLevelDetokenizer)) == "".join(window)


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.integers(0, 400), max_size=50), skip=st.booleans())
def test_a_byte_level_stream_cut_short_has_emitted_its_text_up_to_the_last_real_character(
    ids: list[int], skip: bool, tiny_tokenizer: Tokenizer
) -> None:
    """What a stop token leaves (no flush): every character decoded so far, none of a trailing U+FFFD run."""
    detok = ByteLevelDetokenizer(tiny_tokenizer, skip)
    emitted = ""
    for cut, token in enumerate(ids, start=1):
        emitted += detok.push([token])
        assert emitted == tiny_tokenizer.decode(ids[:cut], skip_special_tokens=skip).rstrip("\ufffd")


def _byte_token(tokenizer: Tokenizer, byte: int) -> int:
    token_bytes = tokenizer.token_bytes
    assert token_bytes is not None
    return next(i for i in range(tokenizer.vocab_size) if token_bytes.spell(i, False) == bytes([byte]))


@pytest.mark.parametrize("unfinished", ["fish", "surrogate"])
@pytest.mark.parametrize("finished", [True, False])
def test_characters_the_prompt_began_are_the_prompts(
    unfinished: str, finished: bool, tiny_tokenizer: Tokenizer
) -> None:
    """A prompt given as ids may stop inside a character (its text ends in U+FFFD: one for 🐟's first three bytes,
    two for ED B1, a surrogate's start): the output starts after them, whether its first token finishes them or
    is something else (a JSON "[")."""
    fish = tiny_tokenizer.encode("🐟", add_special_tokens=False)
    bracket = tiny_tokenizer.encode("[", add_special_tokens=False)
    if unfinished == "fish":
        prompt, ending = fish[:-1], fish[-1:]
    else:
        prompt, ending = [_byte_token(tiny_tokenizer, 0xED), _byte_token(tiny_tokenizer, 0xB1)], []
    assert tiny_tokenizer.decode(prompt).endswith("\ufffd")
    output = (ending if finished else []) + bracket
    for make in (detokenizer_for, WindowDetokenizer):
        detok = make(tiny_tokenizer, True, prompt)
        assert "".join(detok.push([token]) for token in output) + detok.flush() == "["
        assert make(tiny_tokenizer, True, prompt).flush() == ""  # nothing generated: nothing shown


@settings(max_examples=100, deadline=None)
@given(prompt=MULTIBYTE, completion=MULTIBYTE)
def test_prompt_context_is_not_repeated(prompt: str, completion: str, tiny_tokenizer: Tokenizer) -> None:
    prompt_ids = tiny_tokenizer.encode(prompt, add_special_tokens=False)
    ids = tiny_tokenizer.encode(prompt + completion, add_special_tokens=False)[len(prompt_ids) :]
    expected = tiny_tokenizer.decode(prompt_ids + ids)[len(tiny_tokenizer.decode(prompt_ids)) :]
    assert "".join(stream(tiny_tokenizer, ids, [1], skip=True, prompt=prompt_ids)) == expected


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(text=SMOLLM_ENCODABLE, sizes=st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_smollm2_streaming_equals_full_decode(text: str, sizes: list[int], smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode(text)
    pieces = stream(smollm2_tokenizer, ids, sizes, skip=True)
    assert "".join(pieces) == smollm2_tokenizer.decode(ids) == text
    assert not any("\ufffd" in piece for piece in pieces)


# SentencePiece vocabularies: "▁"-spelled spaces whose first one a decode drops, and byte tokens (byte fallback)
SPM_TEXT = st.lists(
    COMMON_MULTIBYTE | st.sampled_from(["🦜", "Ω", "  ", "Paris", "\n\n"]), min_size=1, max_size=20
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    picks=st.lists(st.integers(0, 10**6), max_size=50),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    skip=st.booleans(),
)
def test_sentencepiece_pieces_of_any_id_sequence_add_up_to_the_full_decode(
    picks: list[int], sizes: list[int], skip: bool, spm: SentencePieceGGUF
) -> None:
    """Lone and misordered byte tokens, control tokens and <unk> among them: no decode may take back text."""
    ids = [pick % spm.tokenizer.vocab_size for pick in picks]
    assert "".join(stream(spm.tokenizer, ids, sizes, skip)) == spm.tokenizer.decode(ids, skip_special_tokens=skip)


@settings(max_examples=200, deadline=None)
@given(text=SPM_TEXT, sizes=st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_sentencepiece_streamed_text_is_the_text_whole(text: str, sizes: list[int], spm: SentencePieceGGUF) -> None:
    """A character the vocabulary lacks comes out whole once its last byte token arrives, and the spaces the
    "▁" pieces spell come out where they belong (the first one of the text is the space prefix's, dropped)."""
    ids = spm.tokenizer.encode(text)
    pieces = stream(spm.tokenizer, ids, sizes, skip=True)
    assert "".join(pieces) == spm.tokenizer.decode(ids)
    assert not any("\ufffd" in piece for piece in pieces)
    if spm.reference.unk_id() not in ids:
        assert "".join(pieces) == text


@settings(max_examples=100, deadline=None)
@given(prompt=SPM_TEXT, completion=SPM_TEXT)
def test_sentencepiece_completion_after_a_prompt_keeps_its_leading_space(
    prompt: str, completion: str, spm: SentencePieceGGUF
) -> None:
    """A completion's first "▁word" is " word" after the prompt, not the "word" it decodes to alone."""
    prompt_ids = spm.tokenizer.encode(prompt)
    ids = spm.tokenizer.encode(prompt + completion)[len(prompt_ids) :]
    expected = spm.tokenizer.decode(prompt_ids + ids)[len(spm.tokenizer.decode(prompt_ids)) :]
    assert "".join(stream(spm.tokenizer, ids, [1], skip=True, prompt=prompt_ids)) == expected


def test_sentencepiece_word_after_the_prompt_streams_with_its_space(llama_spm: SentencePieceGGUF) -> None:
    """A completion's pieces after a prompt: each "▁" a space (none dropped), then the emoji whole."""
    sp, tokenizer = llama_spm.reference, llama_spm.tokenizer
    detok = detokenizer_for(tokenizer, prompt_token_ids=tokenizer.encode("The capital of France is"))
    completion = sp.encode("Paris 🦜")
    assert [sp.id_to_piece(i) for i in completion] == [
        "▁",
        "P",
        "ar",
        "is",
        "▁",
        "<0xF0>",
        "<0x9F>",
        "<0xA6>",
        "<0x9C>",
    ]
    assert [detok.push([i]) for i in completion] == [" ", "P", "ar", "is", " ", "", "", "", "🦜"]
