"""Picks the kernel backend: Triton for an engine on a CUDA device, shoal's C kernels on a CPU.

``attention_backend`` (an engine option) or the ``SHOAL_ATTENTION_BACKEND`` environment variable force
``"torch"``, ``"cpu"`` or ``"triton"``. Triton's kernels compile for CUDA tensors only, so Triton on a CPU device
works only under ``TRITON_INTERPRET=1`` (its CPU interpreter, for tests); asked for otherwise it is an error.
``"cpu"`` builds its C kernels (attention, and a layer's norms, RoPE and SiLU) with the machine's compiler at
first use (``shoal.kernels.cpu``); where it cannot (no compiler, a failed build, an OpenMP runtime other than
torch's), the default serves on the torch path with one warning naming the cause, and an explicit ``"cpu"`` is
an error naming it.
"""

from __future__ import annotations

import logging
import os
from functools import cache

import torch

from shoal.kernels.cpu.layer_ops import LayerOps, load_layer_ops
from shoal.kernels.cpu.library import KernelUnavailable
from shoal.kernels.cpu.paged_attention import PagedAttention, load_paged_attention
from shoal.kernels.ops import KernelOps
from shoal.kernels.torch_ops import TorchOps

log = logging.getLogger(__name__)
BACKENDS = ("torch", "cpu", "triton")
ENV_VAR = "SHOAL_ATTENTION_BACKEND"


def default_backend(device: str = "cpu") -> str:
    """The backend used when nobody asks for one: Triton where the tensors live on a CUDA device, else the C
    kernel's (which falls back to torch's, with a warning, where it cannot be built)."""
    forced = os.environ.get(ENV_VAR)
    if forced:
        return forced
    return "triton" if device.startswith("cuda") else "cpu"


def get_ops(name: str | None = None, device: str = "cpu") -> KernelOps:
    """Returns the ops of the named backend (or the default one for ``device``)."""
    asked = name or os.environ.get(ENV_VAR)
    name = asked or default_backend(device)
    if name not in BACKENDS:
        raise ValueError(f"attention_backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "torch":
        return TorchOps()
    if name == "cpu":
        return _cpu_ops(device, explicit=bool(asked))
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


def _cpu_ops(device: str, explicit: bool) -> KernelOps:
    from shoal.kernels.cpu_ops import CpuOps

    if not device.startswith("cpu"):
        raise ValueError(f"attention_backend 'cpu' (--attention-backend) runs on a CPU device, not {device!r}")
    kernel = _cpu_kernels()
    if not isinstance(kernel, str):
        return CpuOps(*kernel)
    if explicit:
        raise ValueError(f"attention_backend 'cpu' (--attention-backend): shoal's C kernels are unavailable: {kernel}")
    log.warning("attention: torch's gathered path, slower: shoal's C kernels are unavailable: %s", kernel)
    return TorchOps()


@cache
def _cpu_kernels() -> tuple[PagedAttention, LayerOps] | str:
    """The C kernels, built and loaded once per process, or why they cannot serve."""
    try:
        return load_paged_attention(), load_layer_ops()
    except KernelUnavailable as exc:
        return str(exc)
