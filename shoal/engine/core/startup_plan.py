"""The engine's start-up plan: device, dtype, quantization, KV size and ``max_model_len``, the warm-up and the CUDA
graphs, decided in one place and logged as one block of lines, each with its reason.

This module gathers the facts (CUDA, the CPU's flags, the checkpoint's dtype and format, the GPU's measured
memory) and hands them to the pure choosers: ``shoal.engine.hardware`` (device, dtype, quantization),
``kv_budget`` (KV size, ``max_model_len``), ``warm_up`` (which forwards run before ``/ready``) and
``decode_graphs`` (which decode batch sizes are captured). It decides in
two moves because on a GPU the KV size depends on a measurement taken after the weights load: ``plan_hardware``
before loading (``shoal serve`` calls it first, so an impossible option fails at once), ``plan_startup`` after
the profiling forward. ``Phases`` times loading, profiling, warming and capturing for the one line that reports
them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from shoal.cpu_features import cpu_info
from shoal.engine.core.decode_graphs import GraphPlan, plan_graphs
from shoal.engine.core.engine_config import EngineConfig
from shoal.engine.core.kv_budget import CardMemory, KvBudget, kv_budget
from shoal.engine.core.warm_up import WarmUp, plan_warm_up
from shoal.engine.hardware import Choice, choose_device, choose_dtype, choose_quantization
from shoal.engine.loader.gguf_weights import projection_types
from shoal.engine.loader.small_batch_kernel import c_kernel_serves
from shoal.engine.model_config import ModelConfig
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


@dataclass(frozen=True)
class StartupPlan:
    """Everything decided before the engine serves."""

    hardware: HardwarePlan
    kv: KvBudget
    warm_up: WarmUp
    graphs: GraphPlan
    weights: str = "converted cache off"  # what the converted-weights cache did (``WeightsCache.outcome``)

    def lines(self) -> list[str]:
        """The plan, one line per decision with its reason."""
        lines = []
        for option, choice in self.hardware.choices.items():
            suffix = f" on {self.hardware.where}" if option == "device" else ""
            lines.append(f"{option} {choice.value} ({choice.reason}){suffix}")
        lines += [self.kv.summary(), self.warm_up.summary(), self.graphs.summary(), f"weights: {self.weights}"]
        return lines

    def warnings(self) -> list[str]:
        found = [c.warning for c in self.hardware.choices.values() if c.warning]
        return found + ([self.kv.warning] if self.kv.warning else [])


def log_startup_plan(plan: StartupPlan) -> None:
    """The plan as one block (one log record), then its warnings (once per engine start)."""
    log.info("start-up plan:\n  %s", "\n  ".join(plan.lines()))
    for warning in plan.warnings():
        log.warning("%s", warning)


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


def plan_startup(
    config: EngineConfig,
    hardware: HardwarePlan,
    model_config: ModelConfig,
    card: CardMemory | None,
    can_capture: bool = False,
    weights: str = "converted cache off",
) -> StartupPlan:
    """The whole plan once the weights are in (``card``: the GPU's measured memory, None on a CPU or when the KV
    size is explicit; ``can_capture``: graphs can be recorded, on CUDA); ``ValueError`` naming the numbers when
    the cache cannot be sized; ``weights``: what the converted-weights cache did."""
    kv = kv_budget(config, model_config, hardware.dtype, card)
    graphs = plan_graphs(
        config.enforce_eager,
        can_capture,
        model_config.moe is not None,
        config.max_num_seqs,
        config.max_cudagraph_capture_size,
    )
    warm_up = plan_warm_up(config.max_num_batched_tokens, config.max_num_seqs, kv, hardware.device)
    return StartupPlan(hardware, kv, warm_up, graphs, weights)


def needs_profile(config: EngineConfig, hardware: HardwarePlan) -> bool:
    """Whether the KV size waits for a profiling forward: on a GPU, unless a size was given."""
    return hardware.device == "cuda" and not (config.num_kv_blocks or config.kv_cache_bytes)


@dataclass
class Phases:
    """Seconds each start-up phase took, for the one line that reports them."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def summary(self) -> str:
        parts = ", ".join(f"{name} {s:.2f} s" for name, s in self.seconds.items())
        return f"start-up took {sum(self.seconds.values()):.2f} s: {parts}"


def _checkpoint_dtype(source: ModelSource) -> str | None:
    """A Hugging Face config's ``torch_dtype`` (float32 when it names none); None for GGUF."""
    if source.format != "hf":
        return None
    config = json.loads((source.path / "config.json").read_text())
    return config.get("torch_dtype") or config.get("dtype") or "float32"
