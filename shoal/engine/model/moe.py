"""The sparse mixture-of-experts MLP (Mixtral, Qwen3-MoE), its experts batched over the step's tokens.

Routing is transformers': the router's logits, a softmax in fp32, each token's ``k`` most probable experts
(``torch.topk``, so ties fall as they do in transformers), their probabilities rescaled to sum to 1 where the
family does so (Mixtral always, Qwen3-MoE with ``norm_topk_prob``). The experts then run grouped, not per token:
the step's ``tokens x k`` (token, expert) pairs are sorted by expert, so every expert some token chose runs one
gate/up matmul and one down matmul over all of its rows (a Python loop over at most ``num_experts`` experts);
an expert nobody chose costs nothing. Each pair's output returns to its (token, slot) place and a token's ``k``
slots are summed in fp32 with their weights, in a fixed order: no scatter-add, so a CUDA step is as
deterministic as a CPU one. Mixtral's weights multiply in fp32 as in transformers; Qwen3-MoE's too (transformers
first rounds them to the model's dtype: the same in fp32, one bf16 rounding apart in bf16).

The experts' weights are stacked, ``[num_experts, 2 * intermediate, hidden]`` (each expert's gate rows, then
its up rows, as the dense MLP's fused ``gate_up_proj``) and ``[num_experts, hidden, intermediate]``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from shoal.engine.model_config import ModelConfig
from shoal.kernels import KernelOps


def route(router_logits: Tensor, top_k: int, renormalize: bool) -> tuple[Tensor, Tensor]:
    """``(weights, experts)``, both ``[tokens, top_k]``: each token's chosen experts, most probable first, and
    their fp32 softmax probabilities (rescaled to sum to 1 when ``renormalize``)."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, experts


def grouped_experts(
    hidden: Tensor,
    weights: Tensor,
    experts: Tensor,
    gate_up: Tensor,
    down: Tensor,
    silu_and_mul: Callable[[Tensor], Tensor],
) -> Tensor:
    """``sum_j weights[t, j] * expert_{experts[t, j]}(hidden[t])`` for every token ``t``, each expert's rows in
    one matmul pair over the stacked ``gate_up`` / ``down`` weights; returns ``hidden``'s shape and dtype."""
    tokens, top_k = experts.shape
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)  # pair indices (token * top_k + slot), grouped by expert
    counts = torch.bincount(flat, minlength=gate_up.shape[0]).tolist()  # the step's one host sync
    rows = hidden[order // top_k]
    out = torch.empty_like(rows)
    start = 0
    for expert, count in enumerate(counts):
        if count:
            end = start + count
            act = silu_and_mul(nn.functional.linear(rows[start:end], gate_up[expert]))
            out[start:end] = nn.functional.linear(act, down[expert])
            start = end
    per_slot = torch.empty_like(out)
    per_slot[order] = out
    summed = (per_slot.view(tokens, top_k, -1).float() * weights[..., None]).sum(dim=1)
    return summed.to(hidden.dtype)


class SparseMoE(nn.Module):
    """A layer's MLP as a mixture of experts: the router (``gate`` in transformers) and the stacked experts."""

    def __init__(self, config: ModelConfig, ops: KernelOps) -> None:
        super().__init__()
        if config.moe is None:
            raise ValueError("SparseMoE needs a config with a mixture of experts (config.moe)")
        moe = config.moe
        self.ops = ops
        self.top_k, self.renormalize = moe.experts_per_token, moe.norm_topk_prob
        self.router = nn.Linear(config.hidden_size, moe.num_experts, bias=False)
        self.experts_gate_up = nn.Parameter(torch.empty(moe.num_experts, 2 * moe.intermediate_size, config.hidden_size))
        self.experts_down = nn.Parameter(torch.empty(moe.num_experts, config.hidden_size, moe.intermediate_size))

    def forward(self, hidden: Tensor) -> Tensor:
        weights, experts = route(self.router.forward(hidden), self.top_k, self.renormalize)
        return grouped_experts(hidden, weights, experts, self.experts_gate_up, self.experts_down, self.ops.silu_and_mul)
