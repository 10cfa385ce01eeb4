"""The sparse mixture-of-experts MLP (Mixtral, Qwen3-MoE), its experts batched over the step's tokens.

Routing is transformers': the router's logits, a softmax in fp32, each token's ``k`` most probable experts
(``torch.topk``, so ties fall as they do in transformers), their probabilities rescaled to sum to 1 where the
family does so (Mixtral always, Qwen3-MoE with ``norm_topk_prob``). The experts then run grouped, not per token:
the step's ``tokens x k`` (token, expert) pairs are sorted by expert, so every expert some token chose multiplies
all of its rows at once, through ``KernelOps.grouped_matmul`` (torch: one matmul per chosen expert; Triton: one
launch for them all), gate/up then down; an expert nobody chose costs nothing. Each pair's output returns to its
(token, slot) place and a token's ``k`` slots are summed in fp32 with their weights, in a fixed order: no
scatter-add, so a CUDA step is as deterministic as a CPU one. Mixtral's weights multiply in fp32 as in
transformers; Qwen3-MoE's too (transformers first rounds them to the model's dtype: the same in fp32, one bf16
rounding apart in bf16).

The experts' weights are stacked, ``[num_experts, 2 * intermediate, hidden]`` (each expert's gate rows, then
its up rows, as the dense MLP's fused ``gate_up_proj``) and ``[num_experts, hidden, intermediate]``. On a CPU
(fp32, and bf16 where oneDNN computes it) each expert's two weights are oneDNN-packed at load instead
(``pack_experts``), as the dense projections are (``packed_linear.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from shoal.engine.model.packed_linear import pack_weight, packed_linear
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
    num_experts: int,
    run_experts: Callable[[Tensor, list[int]], Tensor],
) -> Tensor:
    """``sum_j weights[t, j] * expert_{experts[t, j]}(hidden[t])`` for every token ``t``; ``run_experts(rows,
    counts)`` computes the experts over rows sorted by expert, ``counts[e]`` of them expert ``e``'s. Returns
    ``hidden``'s shape and dtype."""
    tokens, top_k = experts.shape
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)  # pair indices (token * top_k + slot), grouped by expert
    counts = torch.bincount(flat, minlength=num_experts).tolist()  # the step's one host sync
    out = run_experts(hidden[order // top_k], counts)
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
        self.num_experts = moe.num_experts
        self.packed: tuple[list[Tensor], list[Tensor]] | None = None  # per expert: gate/up, down (oneDNN)

    def pack_experts(self) -> None:
        """Each expert's weights oneDNN-packed (on a CPU); the plain stacks are dropped, costing no memory."""
        self.packed = ([pack_weight(w) for w in self.experts_gate_up], [pack_weight(w) for w in self.experts_down])
        del self.experts_gate_up, self.experts_down

    def run_experts(self, rows: Tensor, counts: list[int]) -> Tensor:
        """Each expert's SwiGLU MLP over its run of ``rows`` (sorted by expert, ``counts[e]`` rows each)."""
        if self.packed is None:
            act = self.ops.silu_and_mul(self.ops.grouped_matmul(rows, self.experts_gate_up, counts))
            return self.ops.grouped_matmul(act, self.experts_down, counts)
        gate_up, down = self.packed
        out = torch.empty_like(rows)
        start = 0
        for expert, count in enumerate(counts):
            if count:
                end = start + count
                act = self.ops.silu_and_mul(packed_linear(rows[start:end], gate_up[expert], None))
                out[start:end] = packed_linear(act, down[expert], None)
                start = end
        return out

    def forward(self, hidden: Tensor) -> Tensor:
        weights, experts = route(self.router.forward(hidden), self.top_k, self.renormalize)
        return grouped_experts(hidden, weights, experts, self.num_experts, self.run_experts)
