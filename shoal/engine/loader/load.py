"""``load_model``: a ``ModelSource`` in, a ready model (``CausalLM``, ``GemmaCausalLM``) in the engine's dtype out
(no transformers)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from shoal.engine.loader.converted_cache import Converted, WeightsCache
from shoal.engine.loader.errors import WeightsError
from shoal.engine.loader.gguf_weights import gguf_head_codes, gguf_int4_codes, iter_gguf, rope_freq_factors
from shoal.engine.loader.huge_pages import move_to_huge_pages
from shoal.engine.loader.onednn_pack import pack_dense_projections
from shoal.engine.loader.quantize import (
    Int4Codes,
    Int8Codes,
    QuantizedLayout,
    quantize_projections,
    quantized_layouts,
    restore_quantized,
    small_batch_rows,
)
from shoal.engine.loader.safetensors_weights import iter_safetensors
from shoal.engine.loader.small_batch_kernel import small_batch_kernel
from shoal.engine.loader.state_dict import build_state_dict, fuse_by_parameter
from shoal.engine.model import Model, build_model
from shoal.engine.model.packed_linear import onednn_packs
from shoal.engine.model_config import ModelConfig
from shoal.gguf_metadata import GgufFile, open_gguf, read_gguf_metadata
from shoal.kernels import KernelOps
from shoal.kernels.cpu import QuantGemv
from shoal.model_registry import ModelSource

log = logging.getLogger(__name__)


def load_config(source: ModelSource) -> ModelConfig:
    """The model's shape alone (cheap for HF; opens the file for GGUF)."""
    if source.format == "hf":
        path = source.path / "config.json"
        try:
            return ModelConfig.from_hf(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise WeightsError(f"cannot read {str(path)!r}: {exc}") from exc
    return _gguf_config(source, open_gguf(source.path))


def load_model(
    source: ModelSource,
    dtype: torch.dtype,
    ops: KernelOps,
    device: torch.device | str = "cpu",
    quantization: str = "none",
    weights_cache: WeightsCache | None = None,
) -> Model:
    """Builds the module without initialising it (meta device), then adopts the checkpoint's tensors.

    ``quantization`` ``int4`` / ``int8`` adds a quantized copy of the projections (``quantize_projections``);
    for int4 a GGUF file's own Q4_0/Q4_1 codes are used, and its Q8_0 LM head's where shoal's C kernel serves
    (``small_batch_kernel``); other projections stored above 4 bits stay dense, and so do a mixture of experts'
    expert weights (a GGUF's dequantized), with a warning saying so. With ``weights_cache`` the converted tensors
    come from its entry for this source and these settings where it has a usable one, and are written to it
    otherwise (``converted_cache``). On a CPU the dense projections multiply oneDNN-packed weights
    (``pack_dense_projections``; fp32, and bf16 where oneDNN computes it), and the other weights end in
    transparent huge pages (``move_to_huge_pages``).
    """
    config = load_config(source)
    kernel = small_batch_kernel() if quantization == "int4" else None
    max_rows = small_batch_rows(dtype, kernel)
    model = entry = None
    if weights_cache is not None:
        settings = {"dtype": str(dtype), "quantization": quantization, "device": torch.device(device).type}
        kernel_isa = kernel.isa if kernel else None
        entry = weights_cache.entry(source.served_name, _source_files(source), **settings, kernel=kernel_isa)
        model = _cached(weights_cache, entry, config, ops, device, kernel, max_rows)
    if model is None:
        model = _converted(source, config, dtype, ops, device, quantization, kernel, max_rows)
        if weights_cache is not None and entry is not None:
            weights_cache.write(entry, Converted(dict(model.state_dict()), quantized_layouts(model)))
    if quantization != "none" and config.moe is not None:
        log.warning(
            "quantization=%s (--quantization) covers the attention, dense MLP and LM head projections only: "
            "the %d experts of each sparse layer stay %s (%s)",
            quantization,
            config.moe.num_experts,
            str(dtype).removeprefix("torch."),
            "dequantized from the file" if source.format == "gguf" else "as loaded",
        )
    if quantization != "none":
        log.info("batches of up to %d rows multiply the quantized projections, larger ones the dense weights", max_rows)
    if onednn_packs(dtype, device):
        pack_dense_projections(model)
    move_to_huge_pages(model)
    return model


def _converted(
    source: ModelSource,
    config: ModelConfig,
    dtype: torch.dtype,
    ops: KernelOps,
    device: torch.device | str,
    quantization: str,
    kernel: QuantGemv | None,
    max_rows: int,
) -> Model:
    """The checkpoint read and converted: dequantized, renamed, fused, cast, quantized."""
    gguf_codes: dict[str, Int4Codes | Int8Codes] | None = None
    if source.format == "hf":
        weights = iter_safetensors(source.path)
    else:
        reader = open_gguf(source.path)
        weights = iter_gguf(reader, config)
        if quantization == "int4":
            int4 = fuse_by_parameter(gguf_int4_codes(reader, config), Int4Codes.cat)
            gguf_codes = {**int4, **gguf_head_codes(reader)}
    model = _adopted(source, config, build_state_dict(config, weights, dtype), ops, device)
    if quantization != "none":
        quantize_projections(model, quantization, gguf_codes, max_rows, kernel)
    return model


def _cached(
    cache: WeightsCache,
    entry: Path,
    config: ModelConfig,
    ops: KernelOps,
    device: torch.device | str,
    kernel: QuantGemv | None,
    max_rows: int,
) -> Model | None:
    """The model from the cache's entry, or None where it has none or it does not fit (logged)."""
    converted = cache.read(entry)
    if converted is None:
        return None
    try:
        model = _adopted(None, config, converted.state, ops, device)
        layouts = {
            n: QuantizedLayout(q.kind, q.packed.to(device), q.scales.to(device)) for n, q in converted.quantized.items()
        }
        restore_quantized(model, layouts, kernel, max_rows)
    except (WeightsError, ValueError, AttributeError) as exc:  # an index that names what the model lacks
        cache.reject(entry, exc)
        return None
    return model


def _adopted(
    source: ModelSource | None,
    config: ModelConfig,
    state: dict[str, torch.Tensor],
    ops: KernelOps,
    device: torch.device | str,
) -> Model:
    """The module built on the meta device around ``state``'s tensors, ties made, on ``device``."""
    with torch.device("meta"):
        model = build_model(config, ops)
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:  # shape mismatches: the message names the tensor
        where = f"{str(source.path)!r}" if source is not None else "the converted weights"
        raise WeightsError(f"{where}: {exc}") from exc
    model.tie_weights()
    return model.requires_grad_(False).to(device).eval()


def _source_files(source: ModelSource) -> list[Path]:
    """The files the converted weights are made of: a GGUF file, or a directory's config and safetensors."""
    if source.format == "gguf":
        return [source.path]
    return [source.path / "config.json", *sorted(source.path.glob("*.safetensors"))]


def _gguf_config(source: ModelSource, reader: GgufFile) -> ModelConfig:
    return ModelConfig.from_gguf(
        read_gguf_metadata(source.path),
        has_output_weight=_has_output(reader),
        rope_freq_factors=rope_freq_factors(reader),
    )


def _has_output(reader: GgufFile) -> bool:
    return any(t.name == "output.weight" for t in reader.tensors)
