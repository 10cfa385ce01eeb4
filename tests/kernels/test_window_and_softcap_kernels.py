"""Sliding windows and soft-capped scores in the Triton decode and prefill kernels, against the torch reference,
in the kernel lane (``kernel_lane.py``: interpreted on a CPU host, compiled on a GPU one).

The reference runs on the same inputs widened to fp32. fp32 outputs must agree to fp32 sums' order; fp16 to the
rounding of the probabilities fed to the second product; bf16 to one bf16 step (2^-7 relative: the interpreter
truncates its fp32 results to bf16 instead of rounding them).
"""

from __future__ import annotations

import pytest
import torch
from kernel_lane import KERNEL_DEVICE, LANE

from shoal.kernels import AttentionMetadata

pytestmark = LANE

TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (4e-3, 1e-2), torch.bfloat16: (4e-3, 1e-2)}  # atol, rtol
# decodes over: 1 token, a full block, a partial block, several 32-token tiles, enough tiles for every split
DECODE_SEQ_LENS = [1, 16, 37, 130, 300]
# prefill: a decode row, a chunk after a cached prefix, a whole prompt, a 70-token chunk over several query tiles
PREFILL_QUERY_LENS = [1, 7, 33, 70]
PREFILL_SEQ_LENS = [1, 40, 33, 150]


def _expected(ops, b, window, softcap) -> torch.Tensor:
    return ops.attention(b.query.float(), b.k_cache.float(), b.v_cache.float(), b.meta, b.scale, window, softcap)


def _assert_matches(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCE[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=rtol)


def _decode(b, num_splits=1, window=None, softcap=None):
    from shoal.kernels.triton import paged_decode_attention

    return paged_decode_attention(
        b.query, b.k_cache, b.v_cache, b.meta.seq_lens, b.meta.block_tables, b.scale, num_splits, window, softcap
    )


def _prefill(b, window=None, softcap=None):
    from shoal.kernels.triton import paged_prefill_attention

    m = b.meta
    return paged_prefill_attention(
        b.query, b.k_cache, b.v_cache, m.query_start_loc, m.seq_lens, m.block_tables, m.max_query_len, b.scale,
        window, softcap,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("window", [1, 20, 130, 1000], ids=lambda w: f"window{w}")
@pytest.mark.parametrize(("num_splits", "block_size"), [(1, 16), (3, 8), (8, 32)], ids=["unsplit", "3-splits", "8"])
def test_decode_kernel_masks_a_sliding_window(paged_batch, torch_ops, dtype, window, num_splits, block_size):
    """Windows of one position, shorter than most contexts, equal to one and longer than all; GQA 4; splits that
    share the window's tiles (more splits than tiles leave some empty)."""
    b = paged_batch([1] * 5, DECODE_SEQ_LENS, 8, 2, 64, dtype, block_size=block_size, num_blocks=256)

    out = _decode(b, num_splits, window)

    _assert_matches(out, _expected(torch_ops, b, window, None), dtype)
    if window < max(DECODE_SEQ_LENS):  # the window matters here: a kernel ignoring it fails
        assert (out.float() - _expected(torch_ops, b, None, None)).abs().max() > 0.05


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("window", [1, 9, 33, 150, 1000], ids=lambda w: f"window{w}")
def test_prefill_kernel_masks_a_sliding_window(paged_batch, torch_ops, dtype, window):
    """Windows shorter than a query tile (late rows see nothing of the first KV tiles), about one tile, equal to
    the longest sequence and longer; chunks that start after a cached prefix; GQA 3 with head_dim 80."""
    b = paged_batch(PREFILL_QUERY_LENS, PREFILL_SEQ_LENS, 6, 2, 80, dtype, block_size=16)

    out = _prefill(b, window)

    _assert_matches(out, _expected(torch_ops, b, window, None), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("softcap", "window"), [(0.5, None), (50.0, None), (2.0, 9)], ids=["0.5", "50", "2+window9"])
def test_kernels_soft_cap_scores(paged_batch, torch_ops, dtype, softcap, window):
    """Caps below the scores' spread (tanh saturated for most: a kernel ignoring the cap fails), far above it
    (Gemma 2's 50: nearly linear), and with a window; decode (split) and prefill."""
    decode = paged_batch([1] * 5, DECODE_SEQ_LENS, 8, 2, 64, dtype, seed=1)
    prefill = paged_batch(PREFILL_QUERY_LENS, PREFILL_SEQ_LENS, 8, 2, 64, dtype, seed=2)
    # scores ~N(0, 1) at this scale would hardly reach a cap of 2: widen them so every cap bends some
    decode.scale = prefill.scale = 0.5

    for b, out in ((decode, _decode(decode, 3, window, softcap)), (prefill, _prefill(prefill, window, softcap))):
        _assert_matches(out, _expected(torch_ops, b, window, softcap), dtype)
        if softcap < 10:
            assert (out.float() - _expected(torch_ops, b, window, None)).abs().max() > 0.05


@pytest.mark.parametrize("window", [3, 40])
def test_windowed_kernels_read_nothing_before_the_window(paged_batch, triton_ops, window):
    """NaN in every cached position that no query of the batch sees: it must not reach any output, so the kernels
    neither read those positions nor let a tile with nothing visible to a row poison that row."""
    b = paged_batch([1, 1, 70, 7], [90, 300, 150, 40], 8, 2, 64, torch.float32, block_size=16)
    clean = triton_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale, window)
    decode = AttentionMetadata.build([1, 1], [90, 300], b.meta.block_tables[:2].tolist(), 16, device=KERNEL_DEVICE)
    clean_decode = triton_ops.attention(b.query[:2], b.k_cache, b.v_cache, decode, b.scale, window)
    k_cache, v_cache = b.k_cache.clone(), b.v_cache.clone()
    query_lens = b.meta.query_start_loc.diff().tolist()
    for s, (seq_len, query_len) in enumerate(zip(b.meta.seq_lens.tolist(), query_lens, strict=True)):
        for p in range(seq_len - query_len - window + 1):  # before the first query's window
            block = b.meta.block_tables[s, p // 16]
            k_cache[block, p % 16] = v_cache[block, p % 16] = float("nan")

    out = triton_ops.attention(b.query, k_cache, v_cache, b.meta, b.scale, window)
    out_decode = triton_ops.attention(b.query[:2], k_cache, v_cache, decode, b.scale, window)

    assert torch.equal(out, clean) and torch.equal(out_decode, clean_decode)


def test_a_window_covering_every_sequence_gives_the_plain_kernels_output(paged_batch, triton_ops):
    """A window as long as the longest sequence hides nothing: bit for bit the unwindowed result."""
    b = paged_batch(PREFILL_QUERY_LENS, PREFILL_SEQ_LENS, 4, 4, 64, torch.float32)
    d = paged_batch([1] * 5, DECODE_SEQ_LENS, 4, 4, 64, torch.float32)
    for batch in (b, d):
        plain = triton_ops.attention(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale)
        windowed = triton_ops.attention(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale, 300)
        assert torch.equal(windowed, plain)
