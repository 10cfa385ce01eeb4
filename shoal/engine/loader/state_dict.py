"""Maps Hugging Face tensor names onto ``CausalLM``'s parameters, fusing Q/K/V and gate/up on the way.

Both checkpoint formats arrive here as ``(hf_name, tensor)`` streams, so naming and fusion live in one place.
Strict both ways: a tensor the model has no place for, or a parameter nothing filled, is an error naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

import torch

from shoal.engine.loader.errors import WeightsError
from shoal.engine.loader.expert_weights import SPARSE_MLP_PARAMETERS, ExpertStacker, router_name
from shoal.engine.model_config import GEMMA_ARCHITECTURES, ModelConfig

# Fused parameter -> the Hugging Face parts concatenated (in this order) along the output dimension.
_FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}
_PART_OF = {part: (fused, i) for fused, parts in _FUSED.items() for i, part in enumerate(parts)}
_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")
T = TypeVar("T")
_IGNORED = re.compile(r".*rotary_emb\.inv_freq")  # a buffer some old checkpoints saved


def expected_parameters(config: ModelConfig) -> set[str]:
    """Every parameter name of ``CausalLM`` (``GemmaCausalLM`` for Gemma) for this config (the tied LM head
    included)."""
    names = {"embed_tokens.weight", "norm.weight", "lm_head.weight"}
    for i in range(config.num_layers):
        prefix = f"layers.{i}."
        mlp = SPARSE_MLP_PARAMETERS if config.is_sparse(i) else ("mlp.gate_up_proj.weight", "mlp.down_proj.weight")
        names |= {
            prefix + n
            for n in (
                "input_layernorm.weight",
                "post_attention_layernorm.weight",
                "self_attn.qkv_proj.weight",
                "self_attn.o_proj.weight",
                *mlp,
            )
        }
        if config.attention_bias:
            names.add(prefix + "self_attn.qkv_proj.bias")
        if config.qk_norm:
            names |= {prefix + "self_attn.q_norm.weight", prefix + "self_attn.k_norm.weight"}
        if config.architecture in GEMMA_ARCHITECTURES:  # norms before and after the MLP too
            names |= {prefix + "pre_feedforward_layernorm.weight", prefix + "post_feedforward_layernorm.weight"}
    return names


def build_state_dict(
    config: ModelConfig, weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Renames, casts to ``dtype`` and fuses; raises ``WeightsError`` on any unknown, missing or misshapen tensor."""
    expected = expected_parameters(config)
    state: dict[str, torch.Tensor] = {}
    parts: dict[str, list[torch.Tensor | None]] = {}
    experts = ExpertStacker(config)
    for hf_name, tensor in weights:
        if _IGNORED.fullmatch(hf_name):
            continue
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        tensor = tensor.to(dtype)
        if experts.take(hf_name, tensor):
            continue
        layer = _LAYER.fullmatch(hf_name)
        if layer and layer[2] in _PART_OF:
            fused, index = _PART_OF[layer[2]]
            name = f"layers.{layer[1]}.{fused}.{layer[3]}"
            slots = parts.setdefault(name, [None] * len(_FUSED[fused]))
            slots[index] = tensor
            if all(t is not None for t in slots):
                state[name] = torch.cat(slots, dim=0)  # type: ignore[arg-type]
                del parts[name]
            continue
        name = router_name(hf_name) or hf_name.removeprefix("model.")
        if name not in expected:
            raise WeightsError(f"checkpoint tensor {hf_name!r} has no place in a {config.architecture} model")
        state[name] = tensor
    if config.tie_word_embeddings and "embed_tokens.weight" in state:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    for name in parts:
        raise WeightsError(f"checkpoint lacks part of {name!r} (fused from separate projections)")
    state |= experts.finish()
    unknown = sorted(set(state) - expected)
    if unknown:
        raise WeightsError(f"checkpoint tensor(s) {', '.join(unknown)} have no place in a {config.architecture} model")
    missing = sorted(expected - set(state))
    if missing:
        raise WeightsError(f"checkpoint lacks tensor(s) {', '.join(missing)}")
    return state


def fuse_by_parameter(parts: dict[str, T], cat: Callable[[list[T]], T]) -> dict[str, T]:
    """Per-tensor values by Hugging Face name -> by ``CausalLM`` parameter name, fused parts concatenated in
    order; a fused parameter missing any of its parts is left out."""
    fused: dict[str, list[T | None]] = {}
    result: dict[str, T] = {}
    for hf_name, value in parts.items():
        layer = _LAYER.fullmatch(hf_name)
        if layer and layer[2] in _PART_OF:
            name, index = _PART_OF[layer[2]]
            fused.setdefault(f"layers.{layer[1]}.{name}.{layer[3]}", [None] * len(_FUSED[name]))[index] = value
        else:
            result[hf_name.removeprefix("model.")] = value
    for name, values in fused.items():
        if all(v is not None for v in values):
            result[name] = cat(values)  # type: ignore[arg-type]
    return result
