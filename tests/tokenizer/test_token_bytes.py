"""A byte-level token's bytes, joined and decoded as UTF-8, are what ``tokenizers`` decodes the ids to."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spm_gguf import SentencePieceGGUF
from tiny_checkpoints import train_tokenizer
from tokenizers import AddedToken

from shoal.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def with_added_tokens() -> Tokenizer:
    """The tiny vocabulary plus added tokens outside the byte alphabet (a space, "é" read as the byte 0xE9)."""
    backend = train_tokenizer(vocab_size=384)
    backend.add_tokens([AddedToken("é", special=False), AddedToken("a b", special=False)])
    backend.add_special_tokens([AddedToken("<x> y", special=True)])
    return Tokenizer(backend=backend, special_tokens={}, eos_token_ids=frozenset())


def spelled(tokenizer: Tokenizer, ids: list[int], skip: bool) -> str:
    token_bytes = tokenizer.token_bytes
    assert token_bytes is not None
    return b"".join(token_bytes.spell(i, skip) for i in ids).decode("utf-8", "replace")


@settings(max_examples=300, deadline=None)
@given(picks=st.lists(st.integers(0, 10**6), max_size=40), skip=st.booleans())
def test_spelled_tokens_decode_as_the_tokenizer_decodes(
    picks: list[int], skip: bool, with_added_tokens: Tokenizer
) -> None:
    """Ids over the whole vocabulary, its added tokens and a few past its end."""
    ids = [pick % (with_added_tokens.vocab_size + 3) for pick in picks]
    assert spelled(with_added_tokens, ids, skip) == with_added_tokens.decode(ids, skip_special_tokens=skip)


def test_added_tokens_spell_as_the_decoder_reads_them(with_added_tokens: Tokenizer) -> None:
    ids = [with_added_tokens.backend.token_to_id(t) for t in ("é", "a b", "<x> y")]
    assert spelled(with_added_tokens, ids, skip=False) == "\ufffda b<x> y"
    assert spelled(with_added_tokens, ids, skip=True) == "\ufffda b"


@settings(max_examples=200, deadline=None)
@given(picks=st.lists(st.integers(0, 10**6), max_size=40), skip=st.booleans())
def test_smollm2_tokens_decode_as_the_tokenizer_decodes(
    picks: list[int], skip: bool, smollm2_tokenizer: Tokenizer
) -> None:
    ids = [pick % smollm2_tokenizer.vocab_size for pick in picks]
    assert spelled(smollm2_tokenizer, ids, skip) == smollm2_tokenizer.decode(ids, skip_special_tokens=skip)


def test_only_a_byte_level_decoder_has_token_bytes(spm: SentencePieceGGUF) -> None:
    assert spm.tokenizer.token_bytes is None
