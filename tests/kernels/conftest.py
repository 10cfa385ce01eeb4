"""Fixtures for the kernel tests: the two backends and random paged batches, on the lane's device.

Without a CUDA GPU the Triton kernels run on Triton's CPU interpreter; with one they run compiled, against the
same torch reference (``kernel_lane.py``). Triton picks compile-or-interpret when a kernel is decorated, i.e. when
``shoal.kernels.triton`` is first imported, so the variable is set here, at collection time, before any test
module imports the kernels (only ``get_ops("triton")`` imports them) -- and only on a host without a GPU, so a GPU
host's engine tests (``tests/engine/test_cuda_path.py``) get compiled kernels in the same run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from kernel_lane import KERNEL_DEVICE, ON_GPU, on_device

if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

from shoal.kernels import AttentionMetadata, KernelOps, TorchOps, get_ops

# atol per dtype for outputs of magnitude ~1: fp16 keeps 11 bits, and attention casts probabilities to fp16;
# bf16 keeps 8, and the kernel and the reference round at different points (compiled only).
ATOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}


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
    return get_ops("triton", device=KERNEL_DEVICE)


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
        gen = torch.Generator().manual_seed(seed)  # a CPU generator: the same batch on every device
        needed = [(s + block_size - 1) // block_size for s in seq_lens]
        pool = torch.randperm(num_blocks // 2, generator=gen, device="cpu") + num_blocks - num_blocks // 2
        tables, used = [], 0
        for n in needed:
            tables.append(pool[used : used + n].tolist())
            used += n
        meta = AttentionMetadata.build(query_lens, seq_lens, tables, block_size, device=KERNEL_DEVICE)
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        k_cache = on_device(torch.randn(shape, generator=gen, device="cpu").to(dtype))
        v_cache = on_device(torch.randn(shape, generator=gen, device="cpu").to(dtype))
        # queries as a strided view of a fused projection, as the model produces them
        fused = torch.randn(sum(query_lens), num_heads + 2 * num_kv_heads, head_dim, generator=gen, device="cpu")
        query = on_device(fused.to(dtype))[:, :num_heads]
        return PagedBatch(query, k_cache, v_cache, meta, head_dim**-0.5)

    return build
