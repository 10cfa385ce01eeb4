"""``--lora-modules-file PATH``: adapters listed in a file, loaded after the model and before ``/ready``, where a
refused one is skipped rather than stopping the start.

The file holds vLLM's JSON form of ``--lora-modules``: a list of ``{"name": ..., "path": ...}`` objects (vLLM's
optional ``base_model_name`` is accepted and ignored). On a cluster it is the fleet's ``<name>-adapters``
ConfigMap, mounted into every engine pod, so a pod the autoscaler adds serves the current list from its first
ready moment, while the pod template never names an adapter (a change of the list does not roll the engines:
the operator loads and unloads on running engines through the run-time endpoints). An adapter the engine refuses
here (a rank above ``--max-lora-rank``, another model's, a source that cannot be fetched) is logged and left out:
the operator then reports it, naming the engine's reason, and the other adapters serve.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from shoal.engine.core.engine_core import EngineCore
from shoal.engine.lora import LoRAError
from shoal.fetch import FetchError, local_path

log = logging.getLogger(__name__)
FLAG = "--lora-modules-file"


def read_modules_file(path: str) -> tuple[tuple[str, str], ...]:
    """The file's adapters as ``(name, source)``; ``ValueError`` naming the flag when it is not that form."""
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{FLAG} {path}: {exc}") from None
    if not isinstance(entries, list):
        raise ValueError(f"{FLAG} {path}: expected a JSON list of {{'name', 'path'}} objects")
    modules = []
    for entry in entries:
        name, source = (entry.get("name"), entry.get("path")) if isinstance(entry, dict) else (None, None)
        if not isinstance(name, str) or not name or not isinstance(source, str) or not source:
            raise ValueError(f"{FLAG} {path}: each entry needs a 'name' and a 'path' string, got {entry!r}")
        modules.append((name, source))
    return tuple(modules)


def load_modules(
    core: EngineCore, modules: Iterable[tuple[str, str]], download_dir: Path | None, reserved: Iterable[str]
) -> EngineCore:
    """Fetches (hf://, s3://), reads and adds each adapter to a core not serving yet; a refused one is logged."""
    reserved = tuple(reserved)
    for name, source in modules:
        try:
            core.add_lora(core.read_lora(name, local_path(source, download_dir, report=log.info), reserved))
        except (LoRAError, FetchError) as exc:
            log.error("%s: adapter %r from %s not loaded: %s", FLAG, name, source, exc)
            continue
        log.info("LoRA adapter %s loaded from %s", name, source)
    return core
