"""What every launcher needs to know about where its kernels run.

Triton decides at decoration time whether ``@triton.jit`` compiles for a GPU or wraps the function for the
CPU interpreter (``TRITON_INTERPRET=1``), so this package must be imported after that variable is set. A
probe kernel decorated here, alongside the real ones, records which of the two happened.
"""

from __future__ import annotations

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def _probe():
    pass


INTERPRETED: bool = isinstance(_probe, InterpretedFunction)


def upcast_dots(dtype: torch.dtype) -> bool:
    """The interpreter multiplies bf16 ``tl.dot`` operands as raw bits, so they go through fp32 there."""
    return INTERPRETED and dtype == torch.bfloat16


def fp32_dots(dtype: torch.dtype) -> bool:
    """Whether ``tl.dot`` sees fp32 operands, which then ask for IEEE fp32 products instead of TF32."""
    return dtype == torch.float32 or upcast_dots(dtype)


def check_device(*tensors: torch.Tensor) -> None:
    """Compiled kernels need CUDA tensors; the interpreter needs CPU ones."""
    want = "cpu" if INTERPRETED else "cuda"
    for tensor in tensors:
        if tensor.device.type != want:
            mode = "the Triton interpreter" if INTERPRETED else "compiled Triton kernels (no TRITON_INTERPRET=1)"
            raise ValueError(f"{mode} need {want} tensors, got one on {tensor.device}")


def pow2(n: int, minimum: int = 1) -> int:
    """The smallest power of two that holds ``n`` and is at least ``minimum``."""
    return max(minimum, triton.next_power_of_2(max(n, 1)))
