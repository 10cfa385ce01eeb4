"""The RoPE table every layer reads: ``cos_sin_cache [max_position, rotary_dim]``, cosines then sines.

Computed once, in fp32, with the same operations as Hugging Face's rotary embedding (inverse frequencies from
``rope_theta``, optionally rescaled by ``linear`` or ``llama3`` rope scaling, or divided by a GGUF's per-frequency
``rope_freqs``), so positions rotate like the reference before the kernels cast the table to the activations'
dtype.
"""

from __future__ import annotations

import math

import torch

from shoal.engine.model_config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """``1 / theta^(2i/d)``, rescaled as the config's ``rope_scaling`` says; fp32 ``[rotary_dim // 2]``."""
    dim = config.rotary_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim))
    if config.rope_freq_factors is not None:  # llama.cpp's form of a scaling: a divisor per frequency
        return inv_freq / torch.tensor(config.rope_freq_factors, dtype=torch.float32, device="cpu")
    scaling = config.rope_scaling or {}
    rope_type = scaling.get("rope_type", "default")
    if rope_type == "linear":
        return inv_freq / scaling["factor"]
    if rope_type == "llama3":
        return _llama3_scaled(inv_freq, scaling)
    return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3.1's scaling: long wavelengths slowed by ``factor``, short ones kept, a smooth blend between."""
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def cos_sin_cache(config: ModelConfig) -> torch.Tensor:
    """fp32 ``[max_position_embeddings, rotary_dim]`` on the CPU: ``cos(p * f)`` then ``sin(p * f)``."""
    inv_freq = inverse_frequencies(config)
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32, device="cpu")
    freqs = positions[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)
