"""Input the kernels do not support fails on the host with a ValueError naming the problem, before any launch."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
from kernel_lane import KERNEL_DEVICE, LANE

from shoal.kernels import AttentionMetadata

pytestmark = LANE


@pytest.fixture(autouse=True)
def _tensors_on_the_lane_device() -> Iterator[None]:
    """The checks below build their tensors with torch's defaults: those land on the lane's device."""
    with torch.device(KERNEL_DEVICE):
        yield


def _attention_inputs(num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, dtype=torch.float32):
    meta = AttentionMetadata.build([3, 1], [3, 20], [[5], [2, 7]], block_size, device=KERNEL_DEVICE)
    k_cache = torch.zeros(8, block_size, num_kv_heads, head_dim, dtype=dtype)
    query = torch.zeros(4, num_heads, head_dim, dtype=dtype)
    return query, k_cache, k_cache.clone(), meta


def _swap(meta: AttentionMetadata, **fields) -> AttentionMetadata:
    values = {name: getattr(meta, name) for name in meta.__dataclass_fields__}
    values.update(fields)
    return AttentionMetadata(**values)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda q, k, v, m: (q, k, v[:, :, :1].contiguous(), m), "v_cache .* must match k_cache"),
        (lambda q, k, v, m: (q, k.transpose(1, 2), v.transpose(1, 2), m), "k_cache must be contiguous"),
        (lambda q, k, v, m: (q[:, :3], k, v, m), "num_heads 3 must be a multiple of num_kv_heads 2"),
        (lambda q, k, v, m: (q.half(), k, v, m), "query dtype torch.float16 must match k_cache"),
        (lambda q, k, v, m: (q.int(), k.int(), v.int(), m), "k_cache dtype torch.int32 is not supported"),
        (lambda q, k, v, m: (q[..., :32], k, v, m), "query head_dim 32 must match k_cache head_dim 64"),
        (
            lambda q, k, v, m: (q[..., ::2], k[..., ::2].contiguous(), v[..., ::2].contiguous(), m),
            "query must be contiguous in its last",
        ),
        (lambda q, k, v, m: (q[0], k, v, m), r"query must be \[num_tokens, num_heads, head_dim\]"),
        (lambda q, k, v, m: (q[:1], k, v, m), "query has 1 tokens, impossible for 2 sequences"),
        (lambda q, k, v, m: (q, k, v, _swap(m, max_seq_len=40)), "max_seq_len 40 does not fit block_tables"),
        (lambda q, k, v, m: (q, k, v, _swap(m, seq_lens=m.seq_lens.long())), "seq_lens dtype torch.int64"),
        (lambda q, k, v, m: (q, k, v, _swap(m, block_tables=m.block_tables[:1])), "must have num_seqs"),
    ],
    ids=[
        "v-shape",
        "strided-cache",
        "heads",
        "query-dtype",
        "int-dtype",
        "head-dim",
        "strided-query",
        "query-rank",
        "too-few-tokens",
        "table-too-short",
        "seq-lens-dtype",
        "table-rows",
    ],
)
def test_attention_rejects_bad_input(triton_ops, change, message):
    query, k_cache, v_cache, meta = change(*_attention_inputs())

    with pytest.raises(ValueError, match=message):
        triton_ops.attention(query, k_cache, v_cache, meta, 0.1)


def test_attention_rejects_unsupported_cache_geometry(triton_ops):
    for kwargs, message in (
        ({"block_size": 12}, "block_size 12 .* must be a power of two"),
        ({"head_dim": 512}, r"head_dim 512 .* must be in \[1, 256\]"),
    ):
        with pytest.raises(ValueError, match=message):
            triton_ops.attention(*_attention_inputs(**kwargs), 0.1)


@pytest.mark.parametrize(
    ("window", "softcap", "message"),
    [
        (0, None, r"sliding_window must be in \[1, 2147483647\], got 0"),
        (2**31, None, r"sliding_window must be in \[1, 2147483647\], got 2147483648"),
        (4.5, None, "sliding_window must be an int, got 4.5"),
        (True, None, "sliding_window must be an int, got True"),
        (None, -1.0, "softcap must be a finite positive number, got -1.0"),
        (None, 0.0, "softcap must be a finite positive number, got 0.0"),
        (None, float("inf"), "softcap must be a finite positive number, got inf"),
        (None, float("nan"), "softcap must be a finite positive number, got nan"),
        (None, True, "softcap must be a finite positive number, got True"),
    ],
)
def test_attention_rejects_a_bad_window_or_soft_cap(triton_ops, window, softcap, message):
    with pytest.raises(ValueError, match=message):
        triton_ops.attention(*_attention_inputs(), 0.1, window, softcap)


def test_write_kv_rejects_bad_input(triton_ops):
    k_cache = torch.zeros(4, 8, 2, 64)
    key = torch.zeros(3, 2, 64)
    slots = torch.tensor([0, 1, 2])
    for args, message in (
        ((key[:, :1], key, k_cache, k_cache.clone(), slots), r"key heads x head_dim \(1, 64\) must match"),
        ((key, key, k_cache, k_cache.clone(), slots[:2]), "one row per token, got 3, 3 and 2"),
        ((key, key, k_cache, k_cache.clone(), slots.float()), "slot_mapping dtype torch.float32"),
        ((key, key, k_cache, k_cache.half(), slots), "v_cache .* must match k_cache"),
    ):
        with pytest.raises(ValueError, match=message):
            triton_ops.write_kv(*args)


def test_rotary_write_kv_rejects_bad_input(triton_ops):
    q, k = torch.zeros(2, 4, 64), torch.zeros(2, 2, 64)
    positions, cos_sin, slots = torch.tensor([0, 1]), torch.zeros(16, 64), torch.tensor([0, 1])
    k_cache = torch.zeros(4, 8, 2, 64)
    for args, message in (
        ((positions, q, k, k, torch.zeros(16, 96), slots), r"rotary_dim 96 .* must be even and <= head_dim"),
        ((positions[:1], q, k, k, cos_sin, slots), "one row per token, got 1, 2 and 2"),
        ((positions, q, k, k, cos_sin, slots[:1]), "one row per token, got 2, 2 and 1"),
        ((positions, q, k, k[:, :1], cos_sin, slots), r"value heads x head_dim \(1, 64\) must match"),
    ):
        *head, slot_mapping = args
        with pytest.raises(ValueError, match=message):
            triton_ops.rotary_write_kv(*head, k_cache, k_cache.clone(), slot_mapping)


def test_elementwise_ops_reject_bad_input(triton_ops):
    x = torch.zeros(3, 64)
    with pytest.raises(ValueError, match=r"weight shape \(32,\) must be \(64,\)"):
        triton_ops.rms_norm(x, torch.ones(32), 1e-6)
    with pytest.raises(ValueError, match=r"residual .* must match x"):
        triton_ops.add_rms_norm(x, torch.zeros(3, 32), torch.ones(64), 1e-6)
    with pytest.raises(ValueError, match=r"x dtype torch.float64 is not supported"):
        triton_ops.rms_norm(x.double(), torch.ones(64), 1e-6)
    with pytest.raises(ValueError, match="gate and up halves"):
        triton_ops.silu_and_mul(torch.zeros(3, 7))
    q, k = torch.zeros(2, 4, 64), torch.zeros(2, 2, 64)
    with pytest.raises(ValueError, match=r"rotary_dim 96 .* must be even and <= head_dim"):
        triton_ops.rotary(torch.tensor([0, 1]), q, k, torch.zeros(16, 96))
    with pytest.raises(ValueError, match="one row per token, got 3, 2 and 2"):
        triton_ops.rotary(torch.tensor([0, 1, 2]), q, k, torch.zeros(16, 64))


def test_tensors_on_a_device_the_kernels_cannot_reach_are_refused(triton_ops):
    with pytest.raises(ValueError, match=r"need (cpu|cuda) tensors, got one on meta"):
        triton_ops.rms_norm(torch.zeros(2, 64, device="meta"), torch.ones(64, device="meta"), 1e-6)


def test_out_of_range_contents_are_masked_inside_the_kernels(triton_ops, paged_batch):
    """Block ids, slots and positions are not checked on the host (that would stall a GPU): the kernels mask them."""
    b = paged_batch([1, 3], [20, 20], 4, 2, 64, torch.float32, num_blocks=8)
    tables = b.meta.block_tables.clone()
    tables[0, 1] = 1000  # positions 16..19 of sequence 0 live in a block past the cache
    tables[1, 0] = -3
    out = triton_ops.attention(b.query, b.k_cache, b.v_cache, _swap(b.meta, block_tables=tables), b.scale)
    assert torch.isfinite(out).all()

    key = torch.randn(2, 2, 64)
    k_cache, v_cache = b.k_cache.clone(), b.v_cache.clone()
    triton_ops.write_kv(key, key, k_cache, v_cache, torch.tensor([8 * 16, 10**6]))
    assert torch.equal(k_cache, b.k_cache) and torch.equal(v_cache, b.v_cache)

    q, k = torch.randn(2, 4, 64), torch.randn(2, 2, 64)
    rq, rk = triton_ops.rotary(torch.tensor([16, -1]), q.clone(), k.clone(), torch.randn(16, 64))
    assert torch.equal(rq, q) and torch.equal(rk, k)


def test_triton_backend_without_gpu_or_interpreter_is_refused_when_chosen():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even on a machine that has one
    code = "from shoal.kernels import get_ops; get_ops('triton')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)

    assert result.returncode != 0
    assert (
        "ValueError: attention_backend 'triton' (--attention-backend) needs --device cuda on a CUDA GPU"
        in result.stderr
    )
    assert "TRITON_INTERPRET=1" in result.stderr
