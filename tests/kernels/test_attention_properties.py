"""Property test: any batch composition gives the reference's attention through TritonOps.

Hypothesis draws the batch (how many sequences, each one's cached context and new-token count), the block size,
the GQA ratio, a sliding window and a soft cap (or none); the kernel choice (decode or prefill) follows from the
batch as in the engine.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_lane import LANE

pytestmark = [*LANE, pytest.mark.timeout(300)]

sequence = st.tuples(st.integers(0, 70), st.integers(1, 40))  # (cached context, new tokens)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sequences=st.lists(sequence, min_size=1, max_size=4),
    decode_only=st.booleans(),
    block_size=st.sampled_from([4, 16, 32]),
    group=st.sampled_from([1, 3, 4]),
    window=st.sampled_from([None, None, 1, 7, 16, 33]),
    softcap=st.sampled_from([None, None, 0.5, 3.0]),
    seed=st.integers(0, 2**16),
)
def test_any_batch_matches_reference(
    paged_batch, close, triton_ops, torch_ops, sequences, decode_only, block_size, group, window, softcap, seed
):
    query_lens = [1 if decode_only else new for _, new in sequences]
    seq_lens = [ctx + q for (ctx, _), q in zip(sequences, query_lens, strict=True)]
    b = paged_batch(query_lens, seq_lens, 2 * group, 2, 64, torch.float32, block_size=block_size, seed=seed)

    out = triton_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale, window, softcap)

    close(out, torch_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale, window, softcap))
