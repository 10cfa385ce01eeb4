"""The module that runs a ``ModelConfig``: Gemma's for Gemma 2/3, Llama's for every other family."""

from __future__ import annotations

from shoal.engine.model.gemma import GemmaCausalLM
from shoal.engine.model.llama import CausalLM
from shoal.engine.model_config import GEMMA_ARCHITECTURES, ModelConfig
from shoal.kernels import KernelOps

Model = CausalLM | GemmaCausalLM


def build_model(config: ModelConfig, ops: KernelOps) -> Model:
    """The family's module, its parameters uninitialised (build it under ``torch.device("meta")`` to load)."""
    if config.architecture in GEMMA_ARCHITECTURES:
        return GemmaCausalLM(config, ops)
    return CausalLM(config, ops)
