"""Fixtures for the kernel tests: the two backends and random paged batches.

The Triton kernels run on Triton's CPU interpreter, GPU or not, so the suite proves the same thing everywhere
(``bench/kernels.py`` checks the compiled kernels against the reference on a GPU). Triton picks
compile-or-interpret when a kernel is decorated, i.e. when ``shoal.kernels.triton`` is first imported, so the
variable is set here, at collection time, before any test module imports the kernels (only
``get_ops("triton")`` imports them).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

os.environ["TRITON_INTERPRET"] = "1"

from shoal.kernels import AttentionMetadata, KernelOps, TorchOps, get_ops

# atol per dtype for outputs of magnitude ~1: fp16 keeps 11 bits, and attention casts probabilities to fp16.
ATOL = {torch.float32: 2e-5, torch.float16: 4e-3}


def assert_matches(out: torch.Tensor, expected: torch.Tensor) -> None:
    """Same dtype and shape as the reference, and equal to it within the reference dtype's tolerance."""
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.float(), expected.float(), atol=ATOL[expected.dtype], rtol=1e-2)


@dataclass
class PagedBatch:
    """One attention step: packed queries, random caches and the metadata that ties them together."""

    query: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    meta: AttentionMetadata
    scale: float


@pytest.fixture(scope="session")
def close() -> Callable[[torch.Tensor, torch.Tensor], None]:
    return assert_matches


@pytest.fixture(scope="session")
def triton_ops() -> KernelOps:
    return get_ops("triton")


@pytest.fixture(scope="session")
def torch_ops() -> TorchOps:
    return TorchOps()


@pytest.fixture
def paged_batch() -> Callable[..., PagedBatch]:
    """Builds a batch with each sequence's blocks drawn at random, without repeats, from a large cache.

    Block ids are shuffled and biased to the top of the cache, so a kernel that ignores the block table, reads
    a neighbouring block or truncates a large offset gets a different answer.
    """

    def build(
        query_lens: list[int],
        seq_lens: list[int],
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        block_size: int = 16,
        num_blocks: int = 256,
        seed: int = 0,
    ) -> PagedBatch:
        gen = torch.Generator().manual_seed(seed)
        needed = [(s + block_size - 1) // block_size for s in seq_lens]
        pool = torch.randperm(num_blocks // 2, generator=gen) + num_blocks - num_blocks // 2
        tables, used = [], 0
        for n in needed:
            tables.append(pool[used : used + n].tolist())
            used += n
        meta = AttentionMetadata.build(query_lens, seq_lens, tables, block_size)
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        k_cache = torch.randn(shape, generator=gen).to(dtype)
        v_cache = torch.randn(shape, generator=gen).to(dtype)
        # queries as a strided view of a fused projection, as the model produces them
        fused = torch.randn(sum(query_lens), num_heads + 2 * num_kv_heads, head_dim, generator=gen)
        query = fused.to(dtype)[:, :num_heads]
        return PagedBatch(query, k_cache, v_cache, meta, head_dim**-0.5)

    return build
