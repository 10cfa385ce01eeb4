"""Hot-path operations of the engine: a torch reference and Triton kernels behind one interface."""

from shoal.kernels.backend import BACKENDS, default_backend, get_ops
from shoal.kernels.metadata import AttentionMetadata
from shoal.kernels.ops import KernelOps
from shoal.kernels.torch_ops import TorchOps

__all__ = ["BACKENDS", "AttentionMetadata", "KernelOps", "TorchOps", "default_backend", "get_ops"]
