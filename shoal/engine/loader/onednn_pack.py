"""Gives every dense projection of a loaded CPU model (fp32, or bf16 where oneDNN computes it) a oneDNN-packed
weight (``PackedLinear``), and each expert of a mixture of experts its packed pair (``SparseMoE.pack_experts``).

Runs after quantization: a quantized projection packs the dense weight its large batches use. A weight another
module shares (an LM head tied to the embedding) stays in place beside its packed copy; every other plain weight
is dropped once packed, so packing costs no memory.
"""

from __future__ import annotations

from collections import Counter

from torch import nn

from shoal.engine.model.moe import SparseMoE
from shoal.engine.model.packed_linear import PackedLinear
from shoal.engine.model.quantized_linear import QuantizedLinear


def pack_dense_projections(model: nn.Module) -> list[str]:
    """Packs in place; returns the names of the projections packed (``NAME.experts`` for a mixture's experts)."""
    uses = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    packed = []
    for name, module in list(model.named_modules()):
        if isinstance(module, QuantizedLinear) and module.weight is not None:
            module.pack_dense(keep_weight=uses[id(module.weight)] > 1)
        elif isinstance(module, SparseMoE):
            module.pack_experts()
            name = f"{name}.experts"
        elif type(module) is nn.Linear:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, PackedLinear(module, keep_weight=uses[id(module.weight)] > 1))
        else:
            continue
        packed.append(name)
    return packed
