"""The sparse MoE block (experts grouped per step) equals a naive per-token mixture of experts.

The reference loops over tokens and, for each, over its chosen experts, with each expert as a plain SwiGLU MLP
of its own ``w1`` / ``w3`` / ``w2``: nothing grouped, sorted or stacked. Hypothesis draws the shapes, the number
of experts per token and the renormalisation; the named cases pin ties, tokens that choose the same experts
and an expert nobody chooses.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.engine.model.moe import SparseMoE, route
from shoal.engine.model_config import ModelConfig, MoeConfig
from shoal.kernels import TorchOps


def moe_block(num_experts: int, top_k: int, renormalize: bool, hidden: int, inter: int, seed: int) -> SparseMoE:
    config = ModelConfig(
        architecture="mixtral",
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=1,
        num_heads=1,
        num_kv_heads=1,
        head_dim=8,
        vocab_size=16,
        rms_norm_eps=1e-5,
        rope_theta=1e4,
        max_position_embeddings=32,
        moe=MoeConfig(num_experts, top_k, inter, renormalize, frozenset({0})),
    )
    block = SparseMoE(config, TorchOps())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in block.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return block


def naive(block: SparseMoE, x: torch.Tensor) -> torch.Tensor:
    """Per token: softmax over the router's logits, the top k by a stable sort, each expert's SwiGLU MLP."""
    inter = block.experts_down.shape[2]
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        probs = torch.softmax(block.router.weight @ x[t], dim=-1)
        chosen = sorted(range(len(probs)), key=lambda e: -probs[e].item())[: block.top_k]
        total = sum(probs[e] for e in chosen) if block.renormalize else 1.0
        for e in chosen:
            w1, w3 = block.experts_gate_up[e, :inter], block.experts_gate_up[e, inter:]
            mlp = block.experts_down[e] @ (torch.nn.functional.silu(w1 @ x[t]) * (w3 @ x[t]))
            out[t] += probs[e] / total * mlp
    return out


def run(block: SparseMoE, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return block.forward(x)


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.integers(1, 24),
    num_experts=st.integers(1, 8),
    data=st.data(),
    renormalize=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_grouped_experts_equal_a_per_token_loop(
    tokens: int, num_experts: int, data: st.DataObject, renormalize: bool, seed: int
) -> None:
    top_k = data.draw(st.integers(1, num_experts), label="top_k")
    block = moe_block(num_experts, top_k, renormalize, hidden=16, inter=12, seed=seed)
    x = torch.randn(tokens, 16, generator=torch.Generator().manual_seed(seed + 1))
    torch.testing.assert_close(run(block, x), naive(block, x), atol=1e-5, rtol=1e-5)


def test_tokens_that_choose_the_same_experts_get_the_same_output() -> None:
    block = moe_block(6, 2, renormalize=False, hidden=16, inter=12, seed=1)
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(2)).repeat(3, 1)  # each token three times
    out = run(block, x)
    torch.testing.assert_close(out, naive(block, x), atol=1e-5, rtol=1e-5)
    # bit-equal on the AVX-512 machines this was written on; on an AVX2 one, rows at other places in one expert's
    # GEMM came an ulp apart (1.6e-7)
    torch.testing.assert_close(out[5:10], out[:5], atol=1e-6, rtol=0)
    torch.testing.assert_close(out[10:], out[:5], atol=1e-6, rtol=0)


def test_tied_experts_split_the_weight_whichever_is_chosen() -> None:
    """Experts 1, 2 and 3 are copies (same router row, same weights): every token scores them equally, so
    whichever the top-k takes, the result is the reference's."""
    block = moe_block(4, 2, renormalize=True, hidden=16, inter=12, seed=3)
    with torch.no_grad():
        for param in (block.router.weight, block.experts_gate_up, block.experts_down):
            param[2] = param[1]
            param[3] = param[1]
    x = torch.randn(16, 16, generator=torch.Generator().manual_seed(4))
    weights, experts = route(block.router.forward(x), 2, renormalize=True)
    copies = experts.ge(1)
    assert copies.all(dim=1).any(), "some token's two places should both go to tied copies"
    assert (copies.sum(dim=1) == 1).any(), "some token's second place should be a three-way tie"
    assert (weights[copies.all(dim=1)] == 0.5).all()
    torch.testing.assert_close(run(block, x), naive(block, x), atol=1e-5, rtol=1e-5)


def test_an_expert_no_token_chooses_is_never_run() -> None:
    """Expert 3's router row makes it the least likely for every (positive) token, and its weights are NaN: any
    computation over it, even one multiplied by a zero weight, would poison the output."""
    block = moe_block(4, 2, renormalize=False, hidden=16, inter=12, seed=5)
    x = torch.randn(12, 16, generator=torch.Generator().manual_seed(6)).abs()
    with torch.no_grad():
        block.router.weight[3] = -5.0
        block.experts_gate_up[3] = float("nan")
        block.experts_down[3] = float("nan")
    _, experts = route(block.router.forward(x), 2, renormalize=False)
    assert not experts.eq(3).any()
    out = run(block, x)
    assert not out.isnan().any()
    torch.testing.assert_close(out, naive(block, x), atol=1e-5, rtol=1e-5)


def test_a_bf16_block_stays_within_bf16_rounding_of_the_reference() -> None:
    """The reference runs in fp32 on the bf16 block's own (rounded) weights and input."""
    block = moe_block(5, 2, renormalize=True, hidden=32, inter=24, seed=7).to(torch.bfloat16)
    x = torch.randn(20, 32, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
    out = run(block, x)
    assert out.dtype == torch.bfloat16
    expected = naive(block.float(), x.float())
    scale = expected.abs().max()
    torch.testing.assert_close(out.float() / scale, expected / scale, atol=2e-2, rtol=0)
