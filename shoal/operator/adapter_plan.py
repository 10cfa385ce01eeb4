"""What one engine must do to serve exactly ``spec.adapters``, and what it serves after: pure, for the run-time
sync (:mod:`.adapter_sync`) and its tests.

The law: an engine's adapters are the cards of its ``GET /v1/models`` whose ``parent`` is the served model. Each
spec adapter not among them is loaded (``POST /v1/load_lora_adapter`` with its name and source); each of them
not in the spec is unloaded (``POST /v1/unload_lora_adapter``). Adapters are told apart by name only, as the
engines' prefix cache does (a changed source under the same name is not reloaded: give new weights a new name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Plan:
    """The calls that bring one engine to the spec: ``load`` as (name, source), ``unload`` by name."""

    load: tuple[tuple[str, str], ...]
    unload: tuple[str, ...]


@dataclass(frozen=True)
class PodAdapters:
    """What one engine pod serves after a sync: the adapters ``loaded``, those it ``refused`` (name -> the engine's
    reason, from its 4xx), or why it could not be asked (``error``; then nothing is known to be loaded)."""

    loaded: frozenset[str] = frozenset()
    refused: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None


def served_adapters(cards: Iterable[Mapping[str, Any]], served_name: str) -> frozenset[str]:
    """The adapters among an engine's ``/v1/models`` cards: those whose ``parent`` is the served model."""
    return frozenset(str(c["id"]) for c in cards if c.get("parent") == served_name and "id" in c)


def plan(wanted: Sequence[tuple[str, str]], served: frozenset[str]) -> Plan:
    """The loads (in the spec's order) and unloads (sorted) that turn ``served`` into the names of ``wanted``."""
    names = {name for name, _ in wanted}
    return Plan(
        load=tuple((name, source) for name, source in wanted if name not in served),
        unload=tuple(sorted(served - names)),
    )


def after(served: frozenset[str], loaded: Iterable[str], unloaded: Iterable[str]) -> frozenset[str]:
    """What an engine serves once the calls that succeeded (``loaded``, ``unloaded``) took effect."""
    return (served - frozenset(unloaded)) | frozenset(loaded)
