"""How many segments decode attention cuts each sequence into: the law of ``choose_num_splits``, by property.

The law: the fewest splits that give every SM ``PROGRAMS_PER_SM`` programs, no segment under
``MIN_TOKENS_PER_SPLIT`` tokens, at most ``MAX_SPLITS``; none where the batch fills the SMs or there are no SMs.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.kernels.triton.decode_attention import (
    MAX_SPLITS,
    MIN_TOKENS_PER_SPLIT,
    PROGRAMS_PER_SM,
    choose_num_splits,
)

pytestmark = pytest.mark.interpret  # importing the kernels' module decorates them: the interpreter's lane

seqs = st.integers(1, 1024)
kv_heads = st.integers(1, 16)
lengths = st.integers(1, 262_144)
sms = st.sampled_from([0, 1, 8, 78, 108, 114, 132, 144])


@given(seqs, kv_heads, lengths, sms)
def test_splits_fill_the_sms_with_the_fewest_segments_no_shorter_than_the_minimum(
    num_seqs, num_kv_heads, max_seq_len, num_sms
):
    splits = choose_num_splits(num_seqs, num_kv_heads, max_seq_len, num_sms)

    programs, target = num_seqs * num_kv_heads, PROGRAMS_PER_SM * num_sms
    assert 1 <= splits <= MAX_SPLITS
    assert splits == 1 or max_seq_len // splits >= MIN_TOKENS_PER_SPLIT  # no segment too short to pay its way
    assert splits == 1 or programs * (splits - 1) < target  # no more than it takes to reach the target
    if splits < min(MAX_SPLITS, max_seq_len // MIN_TOKENS_PER_SPLIT):  # not held back by a cap: target reached
        assert programs * splits >= target


@given(seqs, kv_heads, lengths, lengths, sms)
def test_a_longer_context_never_gets_fewer_splits(num_seqs, num_kv_heads, a, b, num_sms):
    shorter, longer = sorted((a, b))

    assert choose_num_splits(num_seqs, num_kv_heads, shorter, num_sms) <= choose_num_splits(
        num_seqs, num_kv_heads, longer, num_sms
    )


@given(seqs, seqs, kv_heads, lengths, sms)
def test_a_larger_batch_never_gets_more_splits(a, b, num_kv_heads, max_seq_len, num_sms):
    fewer, more = sorted((a, b))

    assert choose_num_splits(more, num_kv_heads, max_seq_len, num_sms) <= choose_num_splits(
        fewer, num_kv_heads, max_seq_len, num_sms
    )


@given(seqs, kv_heads, lengths)
def test_no_sms_to_fill_means_no_split(num_seqs, num_kv_heads, max_seq_len):
    assert choose_num_splits(num_seqs, num_kv_heads, max_seq_len, num_sms=0) == 1


def test_one_long_sequence_on_an_h100_runs_several_programs_per_sm():
    """The issue's case: 1 x 8,192 tokens over 8 KV heads ran 128 programs on 132 SMs, one wave of one each."""
    splits = choose_num_splits(num_seqs=1, num_kv_heads=8, max_seq_len=8192, num_sms=132)

    assert 8 * splits >= 3 * 132
    assert choose_num_splits(num_seqs=256, num_kv_heads=8, max_seq_len=1024, num_sms=132) == 1  # 84% of a copy
    assert choose_num_splits(num_seqs=1, num_kv_heads=8, max_seq_len=200, num_sms=132) == 1
