"""A GGUF's SentencePiece vocabulary encodes and decodes exactly as SentencePiece itself does.

The reference is the ``sentencepiece`` package running the very model whose pieces, scores and token types
the GGUF carries (tiny BPE models trained here as Llama 2's was; Gemma's without a space prefix; one without
byte tokens). SentencePiece's BPE is the only kind llama.cpp's "llama" vocabulary type runs; unigram models
are written as another type ("t5") and are refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spm_gguf import SentencePieceGGUF
from tiny_checkpoints import TRAINING_TEXT

from shoal.gguf_metadata import read_gguf_metadata
from shoal.tokenizer import UnsupportedTokenizerError
from shoal.tokenizer.gguf_vocab import build_gguf_tokenizer

CONTROL = ("<s>", "</s>", "<unk>")
USER_DEFINED = ("<tool>", "</tool>")
WORDS = st.sampled_from(sorted({word for line in TRAINING_TEXT for word in line.split()}))
SPACES = st.sampled_from([" ", "  ", "   ", "\n", "\n\n", "\t", " \n "])
KNOWN_CHARS = st.sampled_from(sorted(set("".join(TRAINING_TEXT))))
UNSEEN = st.sampled_from(["🦜", "🧬", "€", "Ω", "ж", "👩\u200d👧", "\u0301", "\x00", "\U0010fffd"])
ANY_CHAR = st.characters(exclude_categories=("Cs",))  # any code point but lone surrogates
TEXT = (
    st.lists(st.one_of(WORDS, SPACES, KNOWN_CHARS, UNSEEN, ANY_CHAR), max_size=16)
    .map("".join)
    .filter(lambda text: not any(token in text for token in (*CONTROL, *USER_DEFINED)))
)
# "▁" is SentencePiece's own spelling of a space: typed in a text it encodes (in both) as a space would
ROUND_TRIPPING = TEXT.filter(lambda text: "\u2581" not in text)


@settings(max_examples=400, deadline=None)
@given(text=TEXT)
def test_encode_equals_sentencepiece(text: str, spm: SentencePieceGGUF) -> None:
    expected = spm.reference.encode(text)
    assert spm.tokenizer.encode(text, add_special_tokens=False) == expected
    assert spm.tokenizer.encode(text) == [spm.reference.bos_id(), *expected]  # tokenizer.ggml.add_bos_token


@settings(max_examples=300, deadline=None)
@given(text=ROUND_TRIPPING)
def test_decode_round_trips_as_sentencepiece_does(text: str, spm: SentencePieceGGUF) -> None:
    """Byte tokens spell what the vocabulary lacks; without them it is <unk>, a special token that decodes to
    nothing, as <s> does (SentencePiece writes " ⁇ ")."""
    ids = spm.tokenizer.encode(text)
    unk = spm.reference.unk_id()
    assert spm.tokenizer.decode(ids) == spm.reference.decode([i for i in ids if i != unk])
    if unk not in ids:
        assert spm.tokenizer.decode(ids) == text


@settings(max_examples=400, deadline=None)
@given(picks=st.lists(st.integers(0, 10**6), max_size=12))
def test_any_ids_decode_as_sentencepiece_decodes_them(picks: list[int], spm: SentencePieceGGUF) -> None:
    """Random pieces, byte tokens among them that form no character: each byte that is not part of a whole
    character is one U+FFFD, wherever it is."""
    sp = spm.reference
    ordinary = sp.ids_of("normal", "user_defined", "byte")
    ids = [ordinary[pick % len(ordinary)] for pick in picks]
    assert spm.tokenizer.decode(ids) == sp.decode(ids)


def test_the_llama_2_chat_prompt_is_encoded_as_meta_encoded_it(llama_spm: SentencePieceGGUF) -> None:
    """Meta's reference code encodes each turn with SentencePiece and puts BOS before it; the chat template
    writes ``<s>`` as text, which must give the same ids (a space prefix after it, as llama.cpp adds one)."""
    sp, tokenizer = llama_spm.reference, llama_spm.tokenizer
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Name a river."}])
    assert prompt == "<s>[INST] Name a river. [/INST]"
    assert tokenizer.encode(prompt, add_special_tokens=False) == [
        sp.bos_id(),
        *sp.encode("[INST] Name a river. [/INST]"),
    ]


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(TEXT.filter(bool), st.sampled_from([*CONTROL, *USER_DEFINED])), max_size=8))
def test_text_between_special_tokens_encodes_as_sentencepiece_encodes_it_alone(
    parts: list[str], llama_spm: SentencePieceGGUF
) -> None:
    """Control tokens (``<s>``) and user-defined ones (``<tool>``) match whole in the text; each run of text
    between them is SentencePiece's encoding of that run on its own, space prefix included, as in llama.cpp."""
    sp = llama_spm.reference
    runs: list[str | int] = []
    for part in parts:
        if part in (*CONTROL, *USER_DEFINED):
            runs.append(sp.piece_to_id(part))
        elif runs and isinstance(runs[-1], str):
            runs[-1] += part
        else:
            runs.append(part)
    expected = [i for run in runs for i in ([run] if isinstance(run, int) else sp.encode(run))]
    assert llama_spm.tokenizer.encode("".join(parts), add_special_tokens=False) == expected


def test_special_tokens_and_the_chat_template_come_from_the_file(llama_spm: SentencePieceGGUF) -> None:
    sp, tokenizer = llama_spm.reference, llama_spm.tokenizer
    assert tokenizer.special_tokens == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    assert tokenizer.bos_token_id == sp.bos_id() and tokenizer.eos_token_ids == {sp.eos_id()}
    ids = [sp.bos_id(), *sp.encode("Paris <tool>"), sp.eos_id()]
    assert tokenizer.decode(ids) == "Paris <tool>"
    assert tokenizer.decode(ids, skip_special_tokens=False) == "<s> Paris <tool></s>"
    assert tokenizer.vocab_size == sp.vocab_size()


def metadata(spm: SentencePieceGGUF, **changes: Any) -> dict[str, Any]:
    """The file's metadata with ``changes`` (``None`` removes a key), for what the writer would not write."""
    values = {**read_gguf_metadata(spm.path), **{f"tokenizer.ggml.{k}": v for k, v in changes.items()}}
    return {key: value for key, value in values.items() if value is not None}


def test_bos_is_added_unless_the_file_says_otherwise(llama_spm: SentencePieceGGUF) -> None:
    """llama.cpp adds BOS to a SentencePiece vocabulary whose file has no add_bos_token."""
    bos = llama_spm.reference.bos_id()
    assert build_gguf_tokenizer(metadata(llama_spm, add_bos_token=None))[0].encode("hi").ids[0] == bos
    assert build_gguf_tokenizer(metadata(llama_spm, add_bos_token=False))[0].encode("hi").ids[0] != bos


def test_a_file_without_token_types_reads_every_piece_as_normal(llama_spm: SentencePieceGGUF) -> None:
    """As llama.cpp reads such a file: byte tokens are still known by their spelling, so text round-trips."""
    tokenizer, decode = build_gguf_tokenizer(metadata(llama_spm, token_type=None))
    text = "The capital of France is  🦜\n"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == llama_spm.reference.encode(text)
    assert decode is not None and decode([tokenizer.id_to_token(i) for i in ids]) == text


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"model": "t5"}, r"tokenizer.ggml.model='t5' is not supported \(supported: 'gpt2' \(byte-level BPE\), "),
        ({"model": "bert"}, r"'llama' \(SentencePiece BPE\)\)"),
        ({"scores": None}, r"tokenizer.ggml.scores: 0 values for \d+ tokens"),
        ({"scores": [0.0]}, r"tokenizer.ggml.scores: 1 values for \d+ tokens"),
        ({"token_type": [1, 1]}, r"tokenizer.ggml.token_type: 2 values"),
        ({"unknown_token_id": 10**6}, r"tokenizer.ggml.unknown_token_id=1000000 is outside the vocabulary"),
        ({"remove_extra_whitespaces": True}, r"tokenizer.ggml.remove_extra_whitespaces=True is not supported"),
    ],
)
def test_a_vocabulary_we_cannot_rebuild_is_refused_naming_the_field(
    changes: dict[str, Any], named: str, llama_spm: SentencePieceGGUF
) -> None:
    with pytest.raises(UnsupportedTokenizerError, match=named):
        build_gguf_tokenizer(metadata(llama_spm, **changes))
