"""Gathers what the machine and the checkpoint offer, asks ``shoal.engine.hardware`` to choose, logs why."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import torch

from shoal.cpu_features import cpu_info
from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.hardware import Choice, choose_device, choose_dtype, choose_quantization
from shoal.engine.loader.gguf_weights import projection_types
from shoal.engine.loader.small_batch_kernel import c_kernel_serves
from shoal.gguf_metadata import open_gguf
from shoal.model_registry import ModelSource

log = logging.getLogger(__name__)
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class HardwarePlan:
    device: str
    dtype: torch.dtype
    quantization: str
    where: str  # the GPU's name or the CPU's model and flags
    choices: dict[str, Choice]  # option -> what was chosen and why


def log_plan(plan: HardwarePlan) -> None:
    """One line per choice with its reason, then the warnings (once per engine start)."""
    for option, choice in plan.choices.items():
        suffix = f" on {plan.where}" if option == "device" else ""
        log.info("%s %s (%s)%s", option, choice.value, choice.reason, suffix)
    for choice in plan.choices.values():
        if choice.warning:
            log.warning("%s", choice.warning)


def plan_hardware(config: EngineConfig, source: ModelSource) -> HardwarePlan:
    """Device, dtype and quantization for this engine (not logged); an impossible request raises ``ValueError``."""
    cuda = torch.cuda.is_available()
    device = choose_device(config.device, cuda)
    cpu = cpu_info()
    dtype = choose_dtype(
        config.dtype,
        device.value,
        cpu.flags,
        _checkpoint_dtype(source),
        cuda_bf16=cuda and torch.cuda.is_bf16_supported(),
    )
    weight_types = projection_types(open_gguf(source.path)) if source.format == "gguf" else frozenset()
    c_kernel = (
        device.value == "cpu"
        and (config.quantization == "int4" or (config.quantization == "auto" and source.format == "gguf"))
        and c_kernel_serves()
    )
    quantization = choose_quantization(
        config.quantization, device.value, dtype.value, source.format, weight_types, c_kernel
    )
    return HardwarePlan(
        device=device.value,
        dtype=TORCH_DTYPES[dtype.value],
        quantization=quantization.value,
        where=torch.cuda.get_device_name() if device.value == "cuda" else cpu.summary(),
        choices={"device": device, "dtype": dtype, "quantization": quantization},
    )


def _checkpoint_dtype(source: ModelSource) -> str | None:
    """A Hugging Face config's ``torch_dtype`` (float32 when it names none); None for GGUF."""
    if source.format != "hf":
        return None
    config = json.loads((source.path / "config.json").read_text())
    return config.get("torch_dtype") or config.get("dtype") or "float32"
