"""Where the Triton kernel tests run: compiled on a CUDA GPU where torch sees one, else on Triton's CPU interpreter.

The same tests prove the kernels in both lanes. On a CPU-only host ``conftest.py`` sets ``TRITON_INTERPRET=1``
and they run interpreted in fp32 and fp16 (bf16 where the interpreter is exact enough: windows and caps); on a
GPU host nothing is interpreted, the tensors live on the GPU, bf16 joins every dtype list, and the modules are
also marked ``gpu``, so ``make test-gpu`` runs them as the compiled lane. The few tests about the interpreter
itself are skipped on a GPU host, with the reason.
"""

from __future__ import annotations

import pytest
import torch

ON_GPU = torch.cuda.is_available()
KERNEL_DEVICE = "cuda" if ON_GPU else "cpu"

# every module of Triton kernel tests: pytestmark = LANE
LANE = [pytest.mark.interpret, *([pytest.mark.gpu] if ON_GPU else [])]

compiled_only = pytest.mark.skipif(
    not ON_GPU,
    reason="bf16 runs compiled on a GPU: the interpreter multiplies bf16 dots as raw bits and truncates its casts, "
    "so the CPU lane keeps fp32 and fp16",
)
interpreter_only = pytest.mark.skipif(ON_GPU, reason="about Triton's CPU interpreter, which a GPU host does not use")

# fp32 and fp16 in both lanes; bf16 compiled only (marked gpu, so make test-gpu selects it on any host)
DTYPES = [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=[pytest.mark.gpu, compiled_only])]


def on_device(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor built on the CPU (seeded generators are CPU ones) moved to the lane's device."""
    return tensor.to(KERNEL_DEVICE)


def distinct_slots(count: int, low: int, high: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` distinct cache slots drawn from ``[low, high)``, the cache's very last (``high - 1``) first: a step
    never writes one slot twice, and a duplicate would make the kernels' order (threads, GPU programs) the result."""
    perm = torch.randperm(high - low, generator=gen) + low
    last = int((perm == high - 1).nonzero())
    perm[[0, last]] = perm[[last, 0]]
    return perm[:count]
