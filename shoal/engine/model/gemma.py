"""Gemma 2 and Gemma 3 (text) over the paged KV cache: Llama's attention and projections, Gemma's arithmetic.

The batch layout, the fused Q/K/V and gate/up projections and the attention call are ``llama.py``'s; what differs:

- RMSNorm multiplies by ``1 + weight`` in fp32 and then casts (Llama casts, then multiplies by the weight), so the
  checkpoint's norm weights are used as stored. Each layer has four: before and after attention and before and
  after the MLP; each sublayer's output is normed before it joins the residual (the add is fused into the next
  norm, as in Llama).
- The MLP is GeGLU: gelu (tanh approximation) of the gate times the up projection.
- The embeddings are multiplied by sqrt(hidden_size) rounded to the model's dtype, as transformers does.
- Scores are scaled by ``query_pre_attn_scalar ** -0.5``; Gemma 2 soft-caps them (``tanh(s / c) * c``, in the
  attention kernel) and the final logits too.
- Sliding-window and global layers interleave (``ModelConfig.window_of``); Gemma 3's sliding layers rotate with
  their own RoPE base (``rope_local_theta``), and each query and key head is RMS-normed (Gemma's way) before RoPE.

The norms and GeGLU are torch's on every device: the kernels' RMSNorm multiplies by the weight itself.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from shoal.engine.model.llama import MLP, Attention, KVCache, RMSNorm, embedding
from shoal.engine.model.rotary import cos_sin_cache
from shoal.engine.model_config import ModelConfig
from shoal.kernels import AttentionMetadata, KernelOps


class GemmaRMSNorm(RMSNorm):
    """``x / rms(x) * (1 + weight)`` in fp32, cast back: transformers' Gemma2RMSNorm / Gemma3RMSNorm."""

    def forward(self, x: Tensor, residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Returns ``(norm(x + residual), x + residual)``; without a residual, ``x`` itself is the residual."""
        if residual is not None:
            x = x + residual
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).to(x.dtype), x


class GemmaAttention(Attention):
    """Llama's attention with Gemma's per-head query and key norms (Gemma 3)."""

    def __init__(self, config: ModelConfig, ops: KernelOps, layer: int) -> None:
        super().__init__(config, ops, layer)
        if config.qk_norm:
            self.q_norm = GemmaRMSNorm(self.head_dim, config.rms_norm_eps, ops)
            self.k_norm = GemmaRMSNorm(self.head_dim, config.rms_norm_eps, ops)


class GemmaMLP(MLP):
    """GeGLU: ``down(gelu_tanh(gate(x)) * up(x))``, gate and up fused into one projection as in Llama."""

    def forward(self, hidden: Tensor) -> Tensor:
        gate, up = self.gate_up_proj.forward(hidden).chunk(2, dim=-1)
        return self.down_proj.forward(nn.functional.gelu(gate, approximate="tanh") * up)


class GemmaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, ops: KernelOps, layer: int) -> None:
        super().__init__()
        size, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(size, eps, ops)
        self.self_attn = GemmaAttention(config, ops, layer)
        self.post_attention_layernorm = GemmaRMSNorm(size, eps, ops)
        self.pre_feedforward_layernorm = GemmaRMSNorm(size, eps, ops)
        self.mlp = GemmaMLP(config, ops)
        self.post_feedforward_layernorm = GemmaRMSNorm(size, eps, ops)
        # Gemma 3's sliding layers rotate with the local RoPE base
        self.local_rope = config.rope_local_theta is not None and config.window_of(layer) is not None

    def forward(
        self,
        positions: Tensor,
        hidden: Tensor,
        residual: Tensor | None,
        kv_cache: KVCache,
        meta: AttentionMetadata,
        cos_sin: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """Takes and returns the residual stream as ``hidden + residual`` (the add left to the next norm)."""
        hidden, residual = self.input_layernorm.forward(hidden, residual)
        hidden = self.self_attn.forward(positions, hidden, kv_cache, meta, cos_sin)
        hidden, _ = self.post_attention_layernorm.forward(hidden)
        hidden, residual = self.pre_feedforward_layernorm.forward(hidden, residual)
        hidden, _ = self.post_feedforward_layernorm.forward(self.mlp.forward(hidden))
        return hidden, residual


class GemmaCausalLM(nn.Module):
    """Token ids in, fp32 logits for the requested rows out; keys and values land in the paged cache."""

    def __init__(self, config: ModelConfig, ops: KernelOps) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = embedding(config)
        self.layers = nn.ModuleList(GemmaDecoderLayer(config, ops, i) for i in range(config.num_layers))
        self.norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps, ops)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("cos_sin_cache", cos_sin_cache(config), persistent=False)
        if config.rope_local_theta is not None:
            local = dataclasses.replace(config, rope_theta=config.rope_local_theta, rope_scaling=None)
            self.register_buffer("cos_sin_cache_local", cos_sin_cache(local), persistent=False)

    def tie_weights(self) -> None:
        """Shares the embedding matrix with the LM head when the checkpoint says so."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor,
        kv_caches: list[KVCache],
        meta: AttentionMetadata,
        logits_indices: Tensor,
    ) -> Tensor:
        hidden = self.embed_tokens.forward(input_ids)
        hidden = hidden * hidden.new_tensor(self.config.hidden_size**0.5)  # the scale rounded to the dtype, as HF
        residual: Tensor | None = None
        for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
            cos_sin = self.cos_sin_cache_local if layer.local_rope else self.cos_sin_cache
            hidden, residual = layer.forward(positions, hidden, residual, kv_cache, meta, cos_sin)
        hidden, _ = self.norm.forward(hidden, residual)
        logits = self.lm_head.forward(hidden[logits_indices])
        cap = self.config.final_logit_softcapping
        if cap is not None:  # in the model's dtype, as transformers does
            logits = torch.tanh(logits / cap) * cap
        return logits.float()
