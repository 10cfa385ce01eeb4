"""The engine kinds Shoal can run and front, by name."""

from __future__ import annotations

from typing import Literal, get_args

from shoal.engine_kinds.adapter import EngineAdapter
from shoal.engine_kinds.llamacpp import LLAMACPP
from shoal.engine_kinds.sglang import SGLANG
from shoal.engine_kinds.shoal_engine import SHOAL
from shoal.engine_kinds.vllm import VLLM

EngineKind = Literal["shoal", "vllm", "sglang", "llamacpp"]
ENGINE_KINDS: tuple[str, ...] = get_args(EngineKind)
DEFAULT_KIND: EngineKind = "shoal"
ADAPTERS: dict[str, EngineAdapter] = {a.kind: a for a in (SHOAL, VLLM, SGLANG, LLAMACPP)}


class UnknownEngineKind(ValueError):
    """A kind no adapter serves."""


def adapter(kind: str) -> EngineAdapter:
    """The adapter of ``kind``, or an error naming the kinds there are."""
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise UnknownEngineKind(
            f"engine kind {kind!r} is not supported; supported: {', '.join(ENGINE_KINDS)}"
        ) from None
