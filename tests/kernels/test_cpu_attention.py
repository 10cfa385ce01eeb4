"""shoal's C attention kernel over the paged cache against the torch reference, on each path it compiles to.

The reference is ``TorchOps.attention`` (itself checked against a naive loop in test_reference_attention.py) on
the same inputs widened to fp32; bf16 outputs may differ from it by the rounding of the output (one bf16 step),
of the probabilities (the bf16 dot-product path rounds them to bf16 before weighting the values, as the torch
path does) and the fp32 sums' order. Paths: ``-march=native`` (AVX-512 BF16 dot products where the CPU has
them), ``-mno-avx512bf16`` (AVX-512F's fp32 path), ``-mno-avx512f`` (the AVX2 path's intrinsics, on a CPU with
AVX2 and FMA), ``-mno-avx512f -mno-avx2`` (the portable C, which GCC vectorizes for what is left), ``-march=x86-64``
(SSE2 only).
"""

from __future__ import annotations

import logging
import platform
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.cpu_features import cpu_info
from shoal.kernels import AttentionMetadata, TorchOps, backend, get_ops
from shoal.kernels.cpu.build import NATIVE_FLAGS
from shoal.kernels.cpu.layer_ops import load_layer_ops
from shoal.kernels.cpu.library import KernelUnavailable
from shoal.kernels.cpu.paged_attention import PagedAttention, load_paged_attention
from shoal.kernels.cpu_ops import CpuOps

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the paths are x86's")

PATHS = {
    "native": (),
    "no-avx512-bf16": ("-mno-avx512bf16",),
    "avx2": ("-mno-avx512f",),
    "portable": ("-mno-avx512f", "-mno-avx2"),
    "sse2": ("-march=x86-64",),
}
ATOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2}  # outputs ~1: fp32 sums; one bf16 step (2^-7) plus sums


@pytest.fixture(scope="module", params=list(PATHS))
def kernel(request: pytest.FixtureRequest) -> PagedAttention:
    return load_paged_attention((*NATIVE_FLAGS, *PATHS[request.param]))


def check(
    kernel: PagedAttention, batch, dtype: torch.dtype, window: int | None = None, softcap: float | None = None
) -> None:
    out = kernel(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale, window, softcap)
    expected = TorchOps().attention(
        batch.query.float(), batch.k_cache.float(), batch.v_cache.float(), batch.meta, batch.scale, window, softcap
    )
    assert out.dtype == dtype and out.shape == batch.query.shape and out.is_contiguous()
    torch.testing.assert_close(out.float(), expected, atol=ATOL[dtype], rtol=0)


def test_each_build_takes_the_path_its_flags_allow(kernel: PagedAttention, request: pytest.FixtureRequest) -> None:
    path = request.node.callspec.params["kernel"]
    flags = cpu_info().flags
    wide = path in ("native", "no-avx512-bf16") and "avx512f" in flags
    bf16 = wide and path == "native" and "avx512_bf16" in flags
    avx2 = path in ("native", "no-avx512-bf16", "avx2") and "avx2" in flags and "fma" in flags
    assert kernel.isa == ("avx512f+avx512_bf16" if bf16 else "avx512f" if wide else "avx2" if avx2 else "portable C")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("query_lens", "seq_lens", "num_heads", "num_kv_heads", "head_dim", "block_size"),
    [
        ([1], [1], 4, 4, 64, 16),  # one token, no GQA
        ([1, 1, 1, 1], [15, 16, 17, 33], 9, 3, 64, 16),  # decodes either side of block boundaries, GQA 3
        ([1, 1], [200, 3], 8, 1, 128, 16),  # MQA (group 8), head size 128, a long and a short context
        ([1, 1], [40, 70], 32, 8, 64, 64),  # blocks larger than the kernel's 16-key chunks, GQA 4
        ([5, 1, 7], [5, 40, 20], 6, 2, 96, 4),  # prefill, decode, a chunk after cached tokens; small blocks
        ([130], [130], 4, 2, 64, 16),  # a prompt longer than one item's query rows
        ([3, 17], [35, 17], 12, 4, 40, 8),  # head size not a multiple of 16: AVX2's 8 lanes, not AVX-512's 16
        ([4, 1], [30, 19], 6, 2, 20, 8),  # head size not a multiple of 8: the portable loops in any build
        ([2, 1], [9, 1], 3, 3, 8, 2),  # tiny heads and blocks
    ],
)
def test_matches_the_reference(
    kernel, paged_batch, dtype, query_lens, seq_lens, num_heads, num_kv_heads, head_dim, block_size
):
    batch = paged_batch(query_lens, seq_lens, num_heads, num_kv_heads, head_dim, dtype, block_size=block_size)
    check(kernel, batch, dtype)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_many_sequences_take_every_kv_head_at_once_and_match_the_reference(kernel, paged_batch, dtype, threads):
    """Enough work for every thread: items span all KV heads (a block's tokens read as one run), as in a busy
    decode step; a prompt and a chunk after cached tokens ride along."""
    query_lens = [1] * 20 + [40, 9]
    seq_lens = [5 + 7 * i for i in range(20)] + [40, 60]
    batch = paged_batch(query_lens, seq_lens, 12, 4, 64, dtype, block_size=16, num_blocks=512)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        check(kernel, batch, dtype)
    finally:
        torch.set_num_threads(before)


sequence = st.tuples(st.integers(0, 70), st.integers(1, 40))  # (cached context, new tokens)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sequences=st.lists(sequence, min_size=1, max_size=12),
    decode_only=st.booleans(),
    block_size=st.sampled_from([1, 4, 16, 32]),
    group=st.sampled_from([1, 3, 4, 7]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    window=st.sampled_from([None, None, 1, 7, 16, 33]),
    softcap=st.sampled_from([None, None, 0.5, 3.0]),
    seed=st.integers(0, 2**16),
)
def test_any_batch_matches_the_reference(
    paged_batch, sequences, decode_only, block_size, group, dtype, window, softcap, seed
):
    """Any mix of decodes, prompts and chunks after a cached prefix, on the native build, with or without a
    sliding window and a soft cap."""
    query_lens = [1 if decode_only else new for _, new in sequences]
    seq_lens = [ctx + q for (ctx, _), q in zip(sequences, query_lens, strict=True)]
    blocks = 2 * sum(-(-n // block_size) for n in seq_lens) + 16  # the fixture draws from the top half
    batch = paged_batch(query_lens, seq_lens, 2 * group, 2, 64, dtype, block_size, blocks, seed)
    check(load_paged_attention(), batch, dtype, window, softcap)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [1, 4, 16, 17, 100])
def test_a_sliding_window_matches_the_reference(kernel, paged_batch, dtype, window):
    """Windows shorter and longer than a block (16) and than the contexts, across runs and item spans: decodes,
    a prompt, a chunk after cached tokens, 20 decodes more (every KV head in one item)."""
    query_lens = [1, 1, 30, 7, *[1] * 20]
    seq_lens = [1, 50, 30, 41, *[3 + 5 * i for i in range(20)]]
    batch = paged_batch(query_lens, seq_lens, 8, 2, 64, dtype, block_size=16, num_blocks=512)
    check(kernel, batch, dtype, window)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("softcap", "window"), [(0.5, None), (2.0, None), (50.0, None), (1.0, 6)])
def test_soft_capped_scores_match_the_reference(kernel, paged_batch, dtype, softcap, window):
    """Caps below the scores' spread (scores ~N(0, 1): tanh saturated for most), near it, and far above it (tanh
    nearly linear: Gemma 2's 50), alone and with a sliding window, on every path's dot products (head sizes 64
    and 40)."""
    query_lens = [1, 1, 30, 7, *[1] * 20]
    seq_lens = [1, 50, 30, 41, *[3 + 5 * i for i in range(20)]]
    for head_dim in (64, 40):
        batch = paged_batch(query_lens, seq_lens, 8, 2, head_dim, dtype, block_size=16, num_blocks=512)
        if softcap < 10:  # the cap matters here: a kernel ignoring it fails
            plain = kernel(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale, window)
            capped = kernel(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale, window, softcap)
            assert (plain.float() - capped.float()).abs().max() > 0.05
        check(kernel, batch, dtype, window, softcap)


def test_a_row_far_below_its_max_contributes_nothing_and_an_equal_one_half(kernel) -> None:
    """Scores 1e4 apart: the small one's weight underflows to 0 rather than producing inf or NaN; two equal
    scores share the weight evenly, across a chunk boundary too (keys 15 and 16 of blocks of 16)."""
    k_cache = torch.zeros(2, 16, 1, 16)
    v_cache = torch.zeros(2, 16, 1, 16)
    k_cache[0, 3, 0, 0] = 1e4  # key 3 dominates
    v_cache[0, 3, 0] = 1.0
    v_cache[1, 0, 0] = 5.0  # key 16, score 0 like all but key 3
    query = torch.zeros(1, 1, 16)
    query[0, 0, 0] = 1.0
    meta = AttentionMetadata.build([1], [17], [[0, 1]], 16)
    out = kernel(query, k_cache, v_cache, meta, 1.0)
    assert torch.equal(out[0, 0], torch.ones(16))
    k_cache[0, 3, 0, 0] = 0.0  # now all 17 scores equal: the mean of the values
    out = kernel(query, k_cache, v_cache, meta, 1.0)
    torch.testing.assert_close(out[0, 0], (torch.ones(16) + 5.0) / 17)


def test_bad_input_is_refused_with_the_reason(kernel, paged_batch) -> None:
    batch = paged_batch([1, 1], [5, 9], 4, 2, 64, torch.float32)
    with pytest.raises(ValueError, match="describes 2 query rows, got 1"):
        kernel(batch.query[:1], batch.k_cache, batch.v_cache, batch.meta, batch.scale)
    outside = AttentionMetadata.build([1], [5], [[batch.k_cache.shape[0]]], 16)
    with pytest.raises(ValueError, match="block table naming a block outside the cache"):
        kernel(batch.query[:1], batch.k_cache, batch.v_cache, outside, batch.scale)
    with pytest.raises(ValueError, match="must agree"):
        kernel(batch.query, batch.k_cache, batch.v_cache.to(torch.bfloat16), batch.meta, batch.scale)
    assert not kernel.supports(batch.query.half(), batch.k_cache.half())
    with pytest.raises(ValueError, match="sliding_window must be >= 1, got 0"):
        kernel(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale, 0)
    with pytest.raises(ValueError, match=r"softcap must be positive, got -1\.0"):
        kernel(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale, None, -1.0)


def test_cpu_ops_keep_the_torch_path_for_what_the_kernel_does_not_take(paged_batch) -> None:
    batch = paged_batch([3, 1], [3, 20], 4, 2, 64, torch.float16)
    ops = CpuOps(load_paged_attention(), load_layer_ops())
    out = ops.attention(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale)
    assert torch.equal(out, TorchOps().attention(batch.query, batch.k_cache, batch.v_cache, batch.meta, batch.scale))


@pytest.fixture
def fresh_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A process-wide kernel cache emptied before and after, builds in an empty cache folder."""
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    monkeypatch.delenv(backend.ENV_VAR, raising=False)
    backend._cpu_kernels.cache_clear()
    yield monkeypatch
    backend._cpu_kernels.cache_clear()


def test_a_cpu_device_gets_the_c_kernel_by_default(fresh_backend) -> None:
    ops = get_ops(None, "cpu")
    assert isinstance(ops, CpuOps) and ops.name == "cpu"
    assert get_ops("torch", "cpu").name == "torch"
    with pytest.raises(ValueError, match="runs on a CPU device, not 'cuda'"):
        get_ops("cpu", "cuda")


def test_without_a_compiler_the_default_serves_on_torch_with_one_warning_and_an_explicit_ask_fails(
    fresh_backend, caplog: pytest.LogCaptureFixture
) -> None:
    fresh_backend.setenv("CC", "/nonexistent")
    with caplog.at_level(logging.WARNING, logger="shoal.kernels.backend"):
        ops = get_ops(None, "cpu")
    assert type(ops) is TorchOps
    assert [r.getMessage() for r in caplog.records] == [
        "attention: torch's gathered path, slower: shoal's C kernels are unavailable: no C compiler: "
        "'/nonexistent' (from $CC, else 'cc') is not on PATH"
    ]
    with pytest.raises(ValueError, match=r"'cpu' .*unavailable: no C compiler"):
        get_ops("cpu", "cpu")
    fresh_backend.setenv(backend.ENV_VAR, "cpu")
    with pytest.raises(ValueError, match="unavailable: no C compiler"):
        get_ops(None, "cpu")


def test_a_failed_build_is_a_clear_error(fresh_backend) -> None:
    with pytest.raises(KernelUnavailable, match=r"exited 1: .*no-such-flag"):
        load_paged_attention((*NATIVE_FLAGS, "-fno-such-flag"))
