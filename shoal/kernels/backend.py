"""Picks the kernel backend: Triton where CUDA is available, torch otherwise, unless told.

``attention_backend`` (an engine option) or the ``SHOAL_ATTENTION_BACKEND`` environment variable force
``"torch"`` or ``"triton"``; forcing Triton on a CPU machine only works under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import os

import torch

from shoal.kernels.ops import KernelOps
from shoal.kernels.reference import TorchOps

BACKENDS = ("torch", "triton")
ENV_VAR = "SHOAL_ATTENTION_BACKEND"


def default_backend() -> str:
    """The backend used when nobody asks for one."""
    forced = os.environ.get(ENV_VAR)
    if forced:
        return forced
    return "triton" if torch.cuda.is_available() else "torch"


def get_ops(name: str | None = None) -> KernelOps:
    """Returns the ops of the named backend (or the default one)."""
    name = name or default_backend()
    if name not in BACKENDS:
        raise ValueError(f"attention_backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "torch":
        return TorchOps()
    from shoal.kernels.triton.launch import INTERPRETED
    from shoal.kernels.triton_ops import TritonOps

    if not (INTERPRETED or torch.cuda.is_available()):
        raise ValueError(
            "attention_backend 'triton' needs a CUDA GPU, or TRITON_INTERPRET=1 (set before the first use) to run "
            "its kernels on Triton's CPU interpreter"
        )
    return TritonOps()
