"""Paged decode and prefill attention kernels against the torch reference, in the lane's dtypes and device."""

from __future__ import annotations

import pytest
import torch
from kernel_lane import DTYPES, KERNEL_DEVICE, LANE

from shoal.kernels import AttentionMetadata

pytestmark = LANE

# (num_heads, num_kv_heads, head_dim): GQA ratios 1, 3 and 4, head dims 64 and 128
HEADS = [(4, 4, 64), (6, 2, 128), (8, 2, 64)]
# a 1-token sequence, one exactly full block, a partial last block, several 64-token tiles
DECODE_SEQ_LENS = [1, 16, 37, 130]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), HEADS)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_kernel_matches_reference(
    paged_batch, close, torch_ops, dtype, num_heads, num_kv_heads, head_dim, num_splits
):
    from shoal.kernels.triton import paged_decode_attention

    b = paged_batch([1] * 4, DECODE_SEQ_LENS, num_heads, num_kv_heads, head_dim, dtype)

    out = paged_decode_attention(
        b.query, b.k_cache, b.v_cache, b.meta.seq_lens, b.meta.block_tables, b.scale, num_splits
    )

    close(out, torch_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale))


@pytest.mark.parametrize("num_splits", [8, 64])  # 64: the most choose_num_splits gives
def test_decode_kernel_with_more_splits_than_tiles_leaves_empty_segments_out(paged_batch, close, torch_ops, num_splits):
    from shoal.kernels.triton import paged_decode_attention

    b = paged_batch([1, 1], [3, 70], 6, 3, 64, torch.float32, block_size=8)

    out = paged_decode_attention(
        b.query, b.k_cache, b.v_cache, b.meta.seq_lens, b.meta.block_tables, b.scale, num_splits
    )

    close(out, torch_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), HEADS)
def test_prefill_kernel_matches_reference(paged_batch, close, torch_ops, dtype, num_heads, num_kv_heads, head_dim):
    from shoal.kernels.triton import paged_prefill_attention

    # a decode row, a chunk after cached blocks, a whole prompt, a long chunk over several query tiles
    b = paged_batch([1, 7, 33, 70], [1, 40, 33, 150], num_heads, num_kv_heads, head_dim, dtype)

    out = paged_prefill_attention(
        b.query,
        b.k_cache,
        b.v_cache,
        b.meta.query_start_loc,
        b.meta.seq_lens,
        b.meta.block_tables,
        b.meta.max_query_len,
        b.scale,
    )

    close(out, torch_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale))


@pytest.mark.parametrize(
    ("query_lens", "seq_lens"),
    [([1, 1, 1], [5, 64, 200]), ([9, 1, 2], [9, 33, 130])],
    ids=["decode-only", "mixed"],
)
def test_ops_attention_picks_a_kernel_and_matches_reference(
    paged_batch, close, triton_ops, torch_ops, query_lens, seq_lens
):
    # odd shapes: 9 query heads over 3 KV heads (SmolLM2's layout), head_dim 80 padded inside the tile
    b = paged_batch(query_lens, seq_lens, 9, 3, 80, torch.float16, block_size=32, num_blocks=64)

    out = triton_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale)

    close(out, torch_ops.attention(b.query, b.k_cache, b.v_cache, b.meta, b.scale))


def test_ops_attention_reads_nothing_past_a_sequence(paged_batch, triton_ops):
    """Garbage (NaN) in every cache slot a sequence does not own must not reach its output."""
    b = paged_batch([1, 4], [20, 20], 4, 2, 64, torch.float32)
    owned = torch.zeros(b.k_cache.shape[:2], dtype=torch.bool, device=KERNEL_DEVICE)
    for s, n in enumerate(b.meta.seq_lens.tolist()):
        for p in range(n):
            owned[b.meta.block_tables[s, p // 16], p % 16] = True
    k_cache, v_cache = b.k_cache.clone(), b.v_cache.clone()
    k_cache[~owned] = float("nan")
    v_cache[~owned] = float("nan")
    decode = AttentionMetadata.build([1], [20], [b.meta.block_tables[0, :2].tolist()], 16, device=KERNEL_DEVICE)

    assert torch.isfinite(triton_ops.attention(b.query, k_cache, v_cache, b.meta, b.scale)).all()
    assert torch.isfinite(triton_ops.attention(b.query[:1], k_cache, v_cache, decode, b.scale)).all()


def test_empty_batch_gives_empty_output(triton_ops, torch_ops):
    meta = AttentionMetadata.build([], [], [], 16, device=KERNEL_DEVICE)
    query, k_cache = torch.zeros(0, 4, 64, device=KERNEL_DEVICE), torch.zeros(4, 16, 2, 64, device=KERNEL_DEVICE)

    for ops in (triton_ops, torch_ops):
        assert ops.attention(query, k_cache, k_cache.clone(), meta, 0.1).shape == (0, 4, 64)
