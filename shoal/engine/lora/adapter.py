"""A PEFT LoRA adapter read from its directory and checked against the base model's projections.

PEFT writes ``adapter_config.json`` (``r``, ``lora_alpha``, ``target_modules``, ``use_rslora``, ...) and
``adapter_model.safetensors`` with, per adapted module, ``...layers.<i>.<self_attn|mlp>.<name>.lora_A.weight``
(``[r, in]``) and ``lora_B.weight`` (``[out, r]``); the module's output gains ``scale * B @ A @ x`` with
``scale = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with rsLoRA). Here each tensor pair is mapped onto our fused
projection and part (``q_proj`` is part 0 of ``self_attn.qkv_proj``), ``B`` is scaled once, and everything the
engine cannot apply exactly is refused with a ``LoRAError`` that says why: a rank above ``--max-lora-rank``, a
module the model lacks or that LoRA here does not cover (embeddings, the LM head), shapes that do not fit the base
model, DoRA, biases, per-module rank or alpha patterns.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import load_file
from torch import Tensor

from shoal.engine.model.lora_linear import FUSED_PARTS, ProjectionShape

_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight$")
# A PEFT module name -> (our module path, part index; None: the whole fused projection).
_TARGETS: dict[str, tuple[str, int | None]] = {
    name: (path, index if len(parts) > 1 else None)
    for path, parts in FUSED_PARTS.items()
    for index, name in enumerate(parts)
}
_TARGETS.update({"qkv_proj": ("self_attn.qkv_proj", None), "gate_up_proj": ("mlp.gate_up_proj", None)})


class LoRAError(ValueError):
    """An adapter the engine refuses: ``field`` is the request field to blame (``lora_path`` or ``lora_name``),
    ``status`` the HTTP status (404: no such adapter)."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(frozen=True)
class LoRAAdapter:
    """An adapter ready for a slot: per ``(layer, module path)``, ``(part, A [r, in], scale * B [out, r])``."""

    name: str
    path: str
    rank: int
    weights: dict[tuple[int, str], list[tuple[int | None, Tensor, Tensor]]]


def read_adapter(
    name: str, path: Path, shapes: Mapping[tuple[int, str], ProjectionShape], max_rank: int
) -> LoRAAdapter:
    """Reads and checks the adapter in ``path`` against the model's LoRA-capable projections (``shapes``)."""
    config = _read_config(name, path)
    rank = int(config.get("r", 8))
    if rank > max_rank:
        raise LoRAError("lora_path", f"adapter {name!r} has rank {rank}, more than --max-lora-rank {max_rank}")
    for key in ("use_dora", "fan_in_fan_out"):
        if config.get(key):
            raise LoRAError("lora_path", f"adapter {name!r} sets {key}, which the engine does not apply")
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise LoRAError("lora_path", f"adapter {name!r} has a per-module {key}, which the engine does not apply")
    if config.get("bias", "none") != "none":
        raise LoRAError("lora_path", f"adapter {name!r} trains biases (bias={config['bias']!r}), which LoRA here omits")
    targets = config.get("target_modules") or []
    for target in [targets] if isinstance(targets, str) else targets:
        if isinstance(targets, list) and target not in _TARGETS:
            raise LoRAError(
                "lora_path", f"adapter {name!r} targets {target!r}, which the model lacks or LoRA here omits"
            )
    alpha = float(config.get("lora_alpha", rank))
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    pairs = _pairs(name, _read_tensors(name, path))
    weights: dict[tuple[int, str], list[tuple[int | None, Tensor, Tensor]]] = {}
    for (layer, module), (lora_a, lora_b) in sorted(pairs.items()):
        target_path, part = _TARGETS[module]
        shape = shapes.get((layer, target_path))
        if shape is None:
            raise LoRAError("lora_path", f"adapter {name!r} adapts layers.{layer}.{module}, which the model lacks")
        out = sum(shape.part_sizes) if part is None else shape.part_sizes[part]
        if lora_a.shape[0] > max_rank or lora_a.shape[0] != lora_b.shape[1]:
            raise LoRAError(
                "lora_path",
                f"adapter {name!r}: layers.{layer}.{module} has rank {lora_a.shape[0]}, "
                f"B {list(lora_b.shape)} (at most --max-lora-rank {max_rank})",
            )
        if lora_a.shape[1] != shape.in_features or lora_b.shape[0] != out:
            raise LoRAError(
                "lora_path",
                f"adapter {name!r} does not fit the base model: layers.{layer}.{module} maps "
                f"{lora_a.shape[1]} -> {lora_b.shape[0]} features, the model's {shape.in_features} -> {out}",
            )
        weights.setdefault((layer, target_path), []).append((part, lora_a.float(), lora_b.float() * scale))
    return LoRAAdapter(name=name, path=str(path), rank=rank, weights=weights)


def _read_config(name: str, path: Path) -> dict:
    config_path = path / "adapter_config.json"
    if not config_path.is_file():
        raise LoRAError("lora_path", f"adapter {name!r}: no adapter_config.json in {str(path)!r}")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise LoRAError("lora_path", f"adapter {name!r}: cannot read {str(config_path)!r}: {exc}") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA":
        raise LoRAError("lora_path", f"adapter {name!r}: {str(config_path)!r} is not a LoRA adapter's config")
    return config


def _read_tensors(name: str, path: Path) -> dict[str, Tensor]:
    weights_path = path / "adapter_model.safetensors"
    if not weights_path.is_file():
        raise LoRAError("lora_path", f"adapter {name!r}: no adapter_model.safetensors in {str(path)!r}")
    try:
        return load_file(str(weights_path))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for a damaged file
        raise LoRAError("lora_path", f"adapter {name!r}: cannot read {str(weights_path)!r}: {exc}") from None


def _pairs(name: str, tensors: dict[str, Tensor]) -> dict[tuple[int, str], tuple[Tensor, Tensor]]:
    """``(layer, module) -> (A, B)``; a tensor that is no decoder projection's A or B is refused."""
    found: dict[tuple[int, str], dict[str, Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.search(key)
        if match is None or match.group(3) not in _TARGETS:
            raise LoRAError("lora_path", f"adapter {name!r} has {key!r}, which the model lacks or LoRA here omits")
        layer, module, which = int(match.group(1)), match.group(3), match.group(4)
        found.setdefault((layer, module), {})[which] = tensor
    pairs = {}
    for (layer, module), ab in found.items():
        if set(ab) != {"A", "B"}:
            raise LoRAError("lora_path", f"adapter {name!r}: layers.{layer}.{module} lacks lora_A or lora_B")
        pairs[(layer, module)] = (ab["A"], ab["B"])
    if not pairs:
        raise LoRAError("lora_path", f"adapter {name!r} has no LoRA weights")
    return pairs
