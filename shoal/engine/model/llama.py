"""The Llama family (Llama 2/3, Mistral, Qwen2, Qwen3, Phi-3, Mixtral and Qwen3-MoE; sliding windows, per layer
too) over a paged KV cache.

A batch is flat: the new tokens of every sequence are packed into one ``[num_tokens]`` dimension and
``AttentionMetadata`` says which rows belong to which sequence and where their keys live in the cache, so
prefill, chunked prefill and decode are one code path. Every hot operation (norms, RoPE, SwiGLU, KV writes,
attention) goes through ``KernelOps``, so the same module runs on the torch path and on Triton kernels.
Inside the model, submodules are run through ``.forward`` rather than ``__call__``: a batch-1 step makes ~270
module calls, and ``nn.Module.__call__``'s hook checks were ~3% of its CPU time (nothing here uses hooks).
Q/K/V and gate/up projections are fused into one matmul each (the loader concatenates the weights); the residual
add is fused into the following RMSNorm as in vLLM; RoPE and the KV-cache write are one op (``rotary_write_kv``). Only the rows in ``logits_indices`` reach the LM head.
A layer's MLP is dense or, in a mixture-of-experts model, ``SparseMoE`` (``moe.py``), as the config says per layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from shoal.engine.model.moe import SparseMoE
from shoal.engine.model.rotary import cos_sin_cache
from shoal.engine.model_config import ModelConfig, UnsupportedModelError
from shoal.kernels import AttentionMetadata, KernelOps

if TYPE_CHECKING:
    from shoal.engine.model.decode_stack import DecodeStack

KVCache = tuple[Tensor, Tensor]


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, ops: KernelOps, layer: int = 0) -> None:
        super().__init__()
        self.ops = ops
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = config.attention_scale
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.attention_bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=False)
        self.sliding_window = config.window_of(layer)
        self.softcap = config.attn_logit_softcapping
        if self.sliding_window is not None and not ops.masks_sliding_window:  # refused before any weight loads
            raise UnsupportedModelError(
                f"sliding_window={self.sliding_window}: the model attends within a sliding window, which the "
                f"{ops.name} attention backend does not mask; serve it with another --attention-backend"
            )
        if self.softcap is not None and not ops.caps_attention_logits:
            raise UnsupportedModelError(
                f"attn_logit_softcapping={self.softcap}: the model soft-caps its attention scores, which the "
                f"{ops.name} attention backend does not; serve it with another --attention-backend"
            )
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, ops) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, ops) if config.qk_norm else None

    def forward(
        self, positions: Tensor, hidden: Tensor, kv_cache: KVCache, meta: AttentionMetadata, cos_sin: Tensor
    ) -> Tensor:
        num_tokens = hidden.shape[0]
        heads = self.qkv_proj.forward(hidden).view(num_tokens, self.num_heads + 2 * self.num_kv_heads, self.head_dim)
        q, k, v = heads.split((self.num_heads, self.num_kv_heads, self.num_kv_heads), dim=1)
        if self.q_norm is not None and self.k_norm is not None:  # per head, over head_dim, before RoPE
            q = self.q_norm.forward(q.reshape(-1, self.head_dim))[0].view_as(q)
            k = self.k_norm.forward(k.reshape(-1, self.head_dim))[0].view_as(k)
        k_cache, v_cache = kv_cache
        q = self.ops.rotary_write_kv(positions, q, k, v, cos_sin, k_cache, v_cache, meta.slot_mapping)
        out = self.ops.attention(q, k_cache, v_cache, meta, self.scale, self.sliding_window, self.softcap)
        return self.o_proj.forward(out.reshape(num_tokens, self.q_size))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig, ops: KernelOps) -> None:
        super().__init__()
        self.ops = ops
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.down_proj.forward(self.ops.silu_and_mul(self.gate_up_proj.forward(hidden)))


class RMSNorm(nn.Module):
    """Holds the weight; the computation is the backend's (optionally fused with the residual add)."""

    def __init__(self, size: int, eps: float, ops: KernelOps) -> None:
        super().__init__()
        self.ops = ops
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: Tensor, residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Returns ``(norm(x + residual), x + residual)``; without a residual, ``x`` itself is the residual."""
        if residual is None:
            return self.ops.rms_norm(x, self.weight, self.eps), x
        return self.ops.add_rms_norm(x, residual, self.weight, self.eps)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, ops: KernelOps, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops)
        self.self_attn = Attention(config, ops, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops)
        self.mlp: MLP | SparseMoE = SparseMoE(config, ops) if config.is_sparse(layer) else MLP(config, ops)

    def forward(
        self,
        positions: Tensor,
        hidden: Tensor,
        residual: Tensor | None,
        kv_cache: KVCache,
        meta: AttentionMetadata,
        cos_sin: Tensor,
    ) -> tuple[Tensor, Tensor]:
        hidden, residual = self.input_layernorm.forward(hidden, residual)
        hidden = self.self_attn.forward(positions, hidden, kv_cache, meta, cos_sin)
        hidden, residual = self.post_attention_layernorm.forward(hidden, residual)
        return self.mlp.forward(hidden), residual


def embedding(config: ModelConfig) -> nn.Embedding:
    """The token embedding, not initialised: the checkpoint's tensor replaces it. On the meta device an
    ``nn.Embedding``'s own ``normal_`` init pulls in torch's decompositions (``torch._dynamo`` and more: 1-2 s of
    imports at every engine start); given its weight it skips the init."""
    return nn.Embedding(
        config.vocab_size, config.hidden_size, _weight=torch.empty(config.vocab_size, config.hidden_size)
    )


class CausalLM(nn.Module):
    """Token ids in, fp32 logits for the requested rows out; keys and values land in the paged cache."""

    cos_sin_cache: Tensor

    def __init__(self, config: ModelConfig, ops: KernelOps) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = embedding(config)
        self.layers = nn.ModuleList(DecoderLayer(config, ops, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, ops)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("cos_sin_cache", cos_sin_cache(config), persistent=False)
        self.decode_stack: DecodeStack | None = None  # the layers in one C call, where bound (``decode_stack``)

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
        residual: Tensor | None = None
        stacked = None if self.decode_stack is None else self.decode_stack(positions, hidden, kv_caches, meta)
        if stacked is not None:
            hidden, residual = stacked
        else:
            cos_sin = self.cos_sin_cache
            for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
                hidden, residual = layer.forward(positions, hidden, residual, kv_cache, meta, cos_sin)
        hidden, _ = self.norm.forward(hidden, residual)
        return self.lm_head.forward(hidden[logits_indices]).float()


def allocate_kv_cache(
    config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> list[KVCache]:
    """One zeroed ``(k_cache, v_cache)`` pair per layer, ``[num_blocks, block_size, num_kv_heads, head_dim]``."""
    shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
    return [
        (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        for _ in range(config.num_layers)
    ]


def kv_cache_bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes one block costs across all layers, keys and values: what a KV budget in bytes is divided by."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_layers * block_size * config.num_kv_heads * config.head_dim * element_size
