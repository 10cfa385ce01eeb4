"""The torch reference (the engine's CPU path, and the oracle of every kernel test) against naive loops."""

from __future__ import annotations

import math

import pytest
import torch

from shoal.kernels import AttentionMetadata, TorchOps


def naive_attention(query, k_cache, v_cache, query_lens, seq_lens, tables, scale, window=None, softcap=None):
    """Token by token, head by head, position by position: the definition of paged causal attention (within the
    last ``window`` positions when one is given, each score ``s`` taken as ``softcap * tanh(s / softcap)`` when
    that is)."""
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = query.shape[1] // num_kv_heads
    out = torch.zeros(query.shape, dtype=torch.float64)
    row = 0
    for qlen, slen, table in zip(query_lens, seq_lens, tables, strict=True):
        for i in range(qlen):
            pos = slen - qlen + i
            for h in range(query.shape[1]):
                kvh = h // group
                seen = range(max(0, pos - window + 1) if window else 0, pos + 1)
                keys = [k_cache[table[p // block_size], p % block_size, kvh].double() for p in seen]
                values = [v_cache[table[p // block_size], p % block_size, kvh].double() for p in seen]
                scores = [float(query[row, h].double() @ k) * scale for k in keys]
                if softcap:
                    scores = [softcap * math.tanh(s / softcap) for s in scores]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                out[row, h] = sum(w / total * v for w, v in zip(weights, values, strict=True))
            row += 1
    return out


@pytest.mark.parametrize(
    ("query_lens", "seq_lens", "num_heads", "num_kv_heads"),
    [
        ([1, 1, 1], [1, 9, 20], 4, 4),  # decode only, partial last blocks
        ([1], [7], 6, 2),  # one decode (batch 1: no padding mask), GQA 3
        ([5, 1, 12], [5, 14, 20], 6, 2),  # prefill, decode and a chunk after cached blocks, GQA 3
        ([3], [3], 4, 1),  # one short prompt, MQA
        ([1, 6, 1, 3], [9, 6, 20, 11], 8, 2),  # decodes between chunks, GQA 4: attended as two groups
    ],
)
@pytest.mark.parametrize(("window", "softcap"), [(None, None), (1, None), (5, None), (None, 1.5), (5, 0.7)])
def test_reference_attention_equals_naive_loop(query_lens, seq_lens, num_heads, num_kv_heads, window, softcap) -> None:
    """Soft caps below the scores' spread (scale 0.3, scores of a few units), so capping changes every row."""
    torch.manual_seed(0)
    block_size, head_dim, num_blocks = 4, 8, 24
    tables = []
    free = torch.randperm(num_blocks).tolist()
    for s in seq_lens:
        n = (s + block_size - 1) // block_size
        tables.append([free.pop() for _ in range(n)])
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, block_size)
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim)
    v_cache = torch.randn_like(k_cache)
    query = torch.randn(sum(query_lens), num_heads, head_dim)

    out = TorchOps().attention(query, k_cache, v_cache, meta, 0.3, window, softcap)

    expected = naive_attention(query, k_cache, v_cache, query_lens, seq_lens, tables, 0.3, window, softcap)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tables", [[[5, 6, 7, 8]], [[5, 6, 8, 7]], [[2]]])
def test_one_decode_over_consecutive_or_scattered_blocks_and_a_reused_ops_equal_the_naive_loop(tables) -> None:
    """Consecutive blocks are read in place (no gather); one ``TorchOps`` keeps per-forward values only for the
    metadata object they came from, so a new batch (here a different layout each call) is never served stale."""
    torch.manual_seed(0)
    block_size, num_kv_heads, head_dim = 4, 2, 8
    k_cache = torch.randn(10, block_size, num_kv_heads, head_dim)
    v_cache = torch.randn_like(k_cache)
    ops = TorchOps()
    for seq_len in (len(tables[0]) * block_size, len(tables[0]) * block_size - 2, 1):
        used = [tables[0][: (seq_len + block_size - 1) // block_size]]
        meta = AttentionMetadata.build([1], [seq_len], used, block_size)
        query = torch.randn(1, 6, head_dim)
        for _ in range(2):  # the second call is a later layer of the same forward pass: the kept layout
            out = ops.attention(query, k_cache, v_cache, meta, 0.3)
            expected = naive_attention(query, k_cache, v_cache, [1], [seq_len], used, 0.3)
            torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


def test_reference_write_kv_puts_each_token_in_its_slot() -> None:
    torch.manual_seed(0)
    k_cache = torch.zeros(6, 4, 2, 8)
    v_cache = torch.zeros_like(k_cache)
    key, value = torch.randn(5, 2, 8), torch.randn(5, 2, 8)
    slots = torch.tensor([23, 0, 9, 10, 4])

    TorchOps().write_kv(key, value, k_cache, v_cache, slots)

    for t, slot in enumerate(slots.tolist()):
        assert torch.equal(k_cache[slot // 4, slot % 4], key[t])
        assert torch.equal(v_cache[slot // 4, slot % 4], value[t])
    assert int((k_cache.abs().sum(-1) > 0).sum()) == 5 * 2


def test_reference_rotary_rotates_each_pair_by_its_angle() -> None:
    torch.manual_seed(0)
    head_dim, rotary_dim, base = 8, 6, 100.0
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(32, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).float()
    query, key = torch.randn(3, 2, head_dim), torch.randn(3, 1, head_dim)
    positions = torch.tensor([0, 7, 31])

    rq, rk = TorchOps().rotary(positions, query.clone(), key.clone(), cache)

    half = rotary_dim // 2
    for x, rx in ((query, rq), (key, rk)):
        for t, pos in enumerate(positions.tolist()):
            for i in range(half):
                angle = float(angles[pos, i])
                pair = complex(x[t, 0, i], x[t, 0, i + half]) * complex(math.cos(angle), math.sin(angle))
                assert rx[t, 0, i].item() == pytest.approx(pair.real, abs=1e-5)
                assert rx[t, 0, i + half].item() == pytest.approx(pair.imag, abs=1e-5)
        assert torch.equal(rx[..., rotary_dim:], x[..., rotary_dim:])


@pytest.mark.parametrize("tokens", [1, 5])
def test_query_and_key_side_by_side_in_the_fused_projection_rotate_exactly_as_apart(tokens: int) -> None:
    """The model's layout (q, k, v heads of a token in one row) takes the one-tensor road; same bits as two."""
    torch.manual_seed(0)
    heads, kv_heads, head_dim = 6, 2, 16
    cache = torch.randn(64, head_dim)
    ops = TorchOps()
    for positions in (torch.randint(0, 64, (tokens,)), torch.randint(0, 64, (tokens,))):  # a new forward each
        qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, dtype=torch.bfloat16)
        q = qkv[:, : heads * head_dim].view(tokens, heads, head_dim)
        k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
        joint_q, joint_k = ops.rotary(positions, q, k, cache)
        apart_q, apart_k = TorchOps().rotary(positions, q.clone(), k.clone(), cache)
        assert torch.equal(joint_q, apart_q) and torch.equal(joint_k, apart_k)
        assert joint_q.shape == q.shape and joint_k.shape == k.shape
        assert joint_k.data_ptr() == joint_q.data_ptr() + heads * head_dim * 2  # rotated as one bf16 tensor


def test_reference_rms_norm_matches_hugging_face() -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    hf = LlamaRMSNorm(48, eps=1e-5)
    hf.weight.data = torch.randn(48).half()
    x = torch.randn(5, 48).half()

    assert torch.equal(TorchOps().rms_norm(x, hf.weight.data, 1e-5), hf(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_reference_rotary_rounds_as_hugging_face_does(dtype: torch.dtype) -> None:
    """The swapped-halves form (``x * cos + cat(x2, x1) * cat(-sin, sin)``) gives HF's bits in every dtype."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    head_dim, tokens = 64, 7
    cache = torch.randn(128, head_dim)
    positions = torch.randint(0, 128, (tokens,))
    query, key = torch.randn(tokens, 9, head_dim, dtype=dtype), torch.randn(tokens, 3, head_dim, dtype=dtype)
    cos, sin = cache[positions].to(dtype).chunk(2, dim=-1)
    hf_q, hf_k = apply_rotary_pos_emb(
        query.transpose(0, 1), key.transpose(0, 1), torch.cat((cos, cos), -1), torch.cat((sin, sin), -1), 0
    )

    rq, rk = TorchOps().rotary(positions, query, key, cache)

    assert torch.equal(rq, hf_q.transpose(0, 1)) and torch.equal(rk, hf_k.transpose(0, 1))
