"""Picks the kernel backend: Triton for an engine on a CUDA device, torch otherwise, unless told.

``attention_backend`` (an engine option) or the ``SHOAL_ATTENTION_BACKEND`` environment variable force
``"torch"`` or ``"triton"``. Triton's kernels compile for CUDA tensors only, so Triton on a CPU device works
only under ``TRITON_INTERPRET=1`` (its CPU interpreter, for tests); asked for otherwise it is an error.
"""

from __future__ import annotations

import os

import torch

from shoal.kernels.ops import KernelOps
from shoal.kernels.reference import TorchOps

BACKENDS = ("torch", "triton")
ENV_VAR = "SHOAL_ATTENTION_BACKEND"


def default_backend(device: str = "cpu") -> str:
    """The backend used when nobody asks for one: Triton only where the tensors live on a CUDA device."""
    forced = os.environ.get(ENV_VAR)
    if forced:
        return forced
    return "triton" if device.startswith("cuda") else "torch"


def get_ops(name: str | None = None, device: str = "cpu") -> KernelOps:
    """Returns the ops of the named backend (or the default one for ``device``)."""
    name = name or default_backend(device)
    if name not in BACKENDS:
        raise ValueError(f"attention_backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "torch":
        return TorchOps()
    from shoal.kernels.triton.launch import INTERPRETED
    from shoal.kernels.triton_ops import TritonOps

    on_cuda = device.startswith("cuda") and torch.cuda.is_available()
    if not (INTERPRETED or on_cuda):
        raise ValueError(
            f"attention_backend 'triton' (--attention-backend) needs --device cuda on a CUDA GPU (device is "
            f"{device!r}), or TRITON_INTERPRET=1 (set before the first use) to run its kernels on Triton's CPU "
            "interpreter"
        )
    return TritonOps()
