"""A mixture of experts' per-expert Hugging Face tensors stacked into ``SparseMoE``'s parameters.

Checkpoints store each expert's projections apart (Mixtral: ``block_sparse_moe.experts.N.w1 / w3 / w2`` for
gate / up / down and ``block_sparse_moe.gate`` for the router; Qwen3-MoE: ``mlp.experts.N.gate_proj / up_proj /
down_proj`` and ``mlp.gate``); the model holds one ``[num_experts, 2 * intermediate, hidden]`` gate/up stack and
one ``[num_experts, hidden, intermediate]`` down stack per layer. A layer's stack is built as soon as its last
expert arrives, so at most one layer's loose experts are held at a time in a file written layer by layer.
"""

from __future__ import annotations

import re

import torch

from shoal.engine.loader.errors import WeightsError
from shoal.engine.model_config import ModelConfig

SPARSE_MLP_PARAMETERS = ("mlp.router.weight", "mlp.experts_gate_up", "mlp.experts_down")
_EXPERT = re.compile(
    r"model\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\.(w1|w3|w2|gate_proj|up_proj|down_proj)\.weight"
)
_ROUTER = re.compile(r"model\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.gate\.weight")
# Hugging Face projection -> (our stacked parameter, its place among that parameter's parts of one expert).
_PARTS = {
    "w1": ("experts_gate_up", 0),
    "gate_proj": ("experts_gate_up", 0),
    "w3": ("experts_gate_up", 1),
    "up_proj": ("experts_gate_up", 1),
    "w2": ("experts_down", 0),
    "down_proj": ("experts_down", 0),
}
_PARTS_PER_EXPERT = {"experts_gate_up": 2, "experts_down": 1}


def router_name(hf_name: str) -> str | None:
    """Our name for a router tensor (``layers.N.mlp.router.weight``), or None if ``hf_name`` is not one."""
    match = _ROUTER.fullmatch(hf_name)
    return f"layers.{match[1]}.mlp.router.weight" if match else None


class ExpertStacker:
    """Takes the per-expert tensors of a checkpoint; ``finish`` gives back every layer's stacks."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.pending: dict[str, list[list[torch.Tensor | None]]] = {}
        self.stacked: dict[str, torch.Tensor] = {}

    def take(self, hf_name: str, tensor: torch.Tensor) -> bool:
        """Whether ``hf_name`` is an expert's tensor (then kept for its stack). One of a dense layer, or of an
        expert the model does not have, is an error naming it."""
        match = _EXPERT.fullmatch(hf_name)
        if match is None:
            return False
        layer, expert = int(match[1]), int(match[2])
        moe = self.config.moe
        if moe is None or not self.config.is_sparse(layer) or expert >= moe.num_experts:
            raise WeightsError(f"checkpoint tensor {hf_name!r} has no place in a {self.config.architecture} model")
        parameter, part = _PARTS[match[3]]
        name = f"layers.{layer}.mlp.{parameter}"
        slots = self.pending.setdefault(name, [[None] * _PARTS_PER_EXPERT[parameter] for _ in range(moe.num_experts)])
        slots[expert][part] = tensor
        if all(t is not None for parts in slots for t in parts):
            del self.pending[name]
            try:
                self.stacked[name] = torch.stack([torch.cat(parts) for parts in slots])  # type: ignore[arg-type]
            except RuntimeError as exc:
                raise WeightsError(f"the experts of {name!r} do not all have one shape: {exc}") from exc
        return True

    def finish(self) -> dict[str, torch.Tensor]:
        """The stacks by parameter name; ``WeightsError`` naming a stack some expert's tensor is missing from."""
        for name, slots in self.pending.items():
            missing = [i for i, parts in enumerate(slots) if any(t is None for t in parts)]
            raise WeightsError(f"checkpoint lacks part of expert(s) {missing} of {name!r} (stacked from each expert's)")
        return self.stacked
