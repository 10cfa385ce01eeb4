"""Streams a GGUF file's tensors under Hugging Face names, dequantized to float32.

llama.cpp's converter permutes the rows of Llama's Q and K projections (it interleaves the two rotary halves
of each head for its own RoPE kernel); we undo that so the weights fit Hugging Face's rotate-half RoPE, which is
the layout the kernels use. Qwen2, Qwen3, Phi-3 and Gemma files are written unpermuted; Phi-3's fused
``attn_qkv`` and ``ffn_up`` (gate rows, then up rows) are its checkpoint's ``qkv_proj`` and ``gate_up_proj``.
Gemma's norms are named after their place around the sublayers, and llama.cpp's converter stores their weights
with Gemma's 1 added (``Gemma2Model.modify_tensors``); we take the 1 off again, since the model adds it
(exactly, for every stored multiplier from 0.5 up: ``x - 1`` is then exact in fp32, and so is ``1 + (x - 1)``).
A mixture of experts' stacked tensors (``ffn_gate_exps`` ``[experts, intermediate, hidden]``...) are streamed one expert at a time
under the Hugging Face checkpoint's per-expert names, which the state dict stacks again in its own layout.

The quantized codes are read here too (``gguf_int4_codes``, ``gguf_head_codes``), so the engine's quantized
layers compute with the file's own weights instead of requantizing the dequantized ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import torch
from gguf.quants import dequantize

from shoal.engine.loader.errors import WeightsError
from shoal.engine.loader.quantize import Int4Codes, Int8Codes, int4_from_gguf_blocks, int8_from_gguf_blocks
from shoal.engine.model_config import GEMMA_ARCHITECTURES, ROPE_TYPES, ModelConfig, UnsupportedModelError
from shoal.gguf_metadata import GgufFile

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",  # a mixture of experts' router
}
# Gemma's norms around attention and the MLP (llama.cpp's ``ffn_norm`` is Llama's post-attention norm)
_GEMMA_LAYER_NAMES = _LAYER_NAMES | {
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
# Phi-3's fused projections, stored as Hugging Face stores them: Q, K, V rows; gate rows then up rows
_PHI3_LAYER_NAMES = _LAYER_NAMES | {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
# A stacked expert tensor -> each expert's projection, as Hugging Face names it.
_EXPERT_STACKS = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}
ROPE_FREQS = "rope_freqs.weight"
# LongRoPE's per-frequency factors (Phi-3 128k, Phi-4-mini), refused as rope_type longrope is for a directory
LONGROPE_FACTORS = ("rope_factors_long.weight", "rope_factors_short.weight")
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_PROJECTIONS = ("attn_qkv", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def hf_name(gguf_name: str, architecture: str = "llama") -> str:
    """The Hugging Face name of a GGUF tensor; an unknown one is an error naming it."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    names = (
        _GEMMA_LAYER_NAMES
        if architecture in GEMMA_ARCHITECTURES
        else _PHI3_LAYER_NAMES
        if architecture == "phi3"
        else _LAYER_NAMES
    )
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match and match[2] in names:
        return f"model.layers.{match[1]}.{names[match[2]]}.{match[3]}"
    raise WeightsError(f"unexpected GGUF tensor {gguf_name!r}")


def unpermute_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K permutation: per head, interleaved row pairs back to two halves."""
    rows = weight.shape[0]
    rest = weight.shape[1:]
    return weight.reshape(num_heads, rows // num_heads // 2, 2, *rest).swapaxes(1, 2).reshape(weight.shape)


def _is_projection(gguf_name: str) -> bool:
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    return gguf_name == "output.weight" or bool(match and match[2] in _PROJECTIONS and match[3] == "weight")


def projection_types(reader: GgufFile) -> frozenset[str]:
    """The GGUF types (``Q4_1``, ``Q8_0``, ``F16``...) of the projection weights: what decides quantization."""
    return frozenset(t.tensor_type.name for t in reader.tensors if _is_projection(t.name))


def _unpermuted(name: str, config: ModelConfig, rows: torch.Tensor) -> torch.Tensor:
    """A projection's int4 code, scale or low rows in Hugging Face's order, contiguous."""
    return _unpermute(name, rows, config).contiguous()


def _unpermute(name: str, rows: Any, config: ModelConfig) -> Any:
    """Q/K projection rows (numpy or torch) back in Hugging Face's order."""
    if config.architecture in ("llama", "mixtral"):  # Mixtral is written as a llama file with experts
        if name.endswith("q_proj.weight"):
            return unpermute_rows(rows, config.num_heads)
        if name.endswith("k_proj.weight"):
            return unpermute_rows(rows, config.num_kv_heads)
    return rows


def gguf_int4_codes(reader: GgufFile, config: ModelConfig) -> dict[str, Int4Codes]:
    """The 4-bit codes of every Q4_0 / Q4_1 projection weight, by Hugging Face name, in PyTorch row order."""
    codes = {}
    for tensor in reader.tensors:
        if tensor.tensor_type.name not in ("Q4_0", "Q4_1") or not _is_projection(tensor.name):
            continue
        name = hf_name(tensor.name, config.architecture)
        shape = (int(tensor.shape[1]), int(tensor.shape[0]))
        blocks = int4_from_gguf_blocks(tensor.data, tensor.tensor_type.name, shape)
        codes[name] = blocks.map_rows(partial(_unpermuted, name, config))
    return codes


def gguf_head_codes(reader: GgufFile) -> dict[str, Int8Codes]:
    """The LM head's Q8_0 codes under ``lm_head.weight``: ``output.weight``'s, or, where the head is tied to the
    embedding (no ``output.weight``), ``token_embd.weight``'s. Empty when that tensor is not Q8_0."""
    tensors = {t.name: t for t in reader.tensors}
    tensor = tensors.get("output.weight", tensors.get("token_embd.weight"))
    if tensor is None or tensor.tensor_type.name != "Q8_0":
        return {}
    shape = (int(tensor.shape[1]), int(tensor.shape[0]))
    return {"lm_head.weight": int8_from_gguf_blocks(tensor.data, shape)}


def rope_freq_factors(reader: GgufFile) -> tuple[float, ...] | None:
    """``rope_freqs.weight``: the per-frequency divisors llama.cpp's converter writes for Llama 3.1+ RoPE scaling
    (instead of the scaling's parameters), or None where the file has none. A file with LongRoPE's factors
    (``rope_factors_long`` / ``rope_factors_short``: Phi-3 128k, Phi-4-mini) is refused, naming them."""
    longrope = [t.name for t in reader.tensors if t.name in LONGROPE_FACTORS]
    if longrope:
        raise UnsupportedModelError(
            f"GGUF tensor(s) {', '.join(longrope)}: LongRoPE scaling (Phi-3 128k and Phi-4-mini context extension) "
            f"is not supported (rope types: {', '.join(ROPE_TYPES)})"
        )
    for tensor in reader.tensors:
        if tensor.name == ROPE_FREQS:
            return tuple(float(x) for x in np.asarray(dequantize(tensor.data, tensor.tensor_type)).reshape(-1))
    return None


def iter_gguf(reader: GgufFile, config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """``(hf_name, float32 tensor)`` pairs in PyTorch layout (GGUF stores shapes innermost-first); the RoPE
    factors are the config's (``rope_freq_factors``), not weights; Gemma's norm weights without the 1 llama.cpp
    added."""
    gemma = config.architecture in GEMMA_ARCHITECTURES
    for tensor in reader.tensors:
        if tensor.name == ROPE_FREQS:
            continue
        array = dequantize(tensor.data, tensor.tensor_type).reshape([int(d) for d in reversed(tensor.shape)])
        stack = _LAYER_TENSOR.fullmatch(tensor.name)
        if stack and stack[2] in _EXPERT_STACKS and stack[3] == "weight":
            for expert, rows in enumerate(array):
                name = f"model.layers.{stack[1]}.mlp.experts.{expert}.{_EXPERT_STACKS[stack[2]]}.weight"
                yield name, _float_tensor(rows)
            continue
        name = hf_name(tensor.name, config.architecture)
        array = _unpermute(name, array, config)
        if gemma and name.endswith("norm.weight"):
            array = array - np.float32(1.0)
        yield name, _float_tensor(array)


def _float_tensor(array: np.ndarray) -> torch.Tensor:
    """A contiguous float32 tensor of its own (unquantized arrays are views of the read-only memory map)."""
    if not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
