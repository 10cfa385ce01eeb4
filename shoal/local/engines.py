"""Which engine binary ``shoal up`` runs for ``spec.engine.kind``, and its command line on this machine.

Shoal's own engine runs from this checkout. ``vllm`` and ``llamacpp`` run the binary named by
``SHOAL_VLLM`` / ``SHOAL_LLAMA_SERVER`` when set, else ``vllm`` / ``llama-server`` found on ``PATH``
(``hack/vllm-cpu/install.sh`` and ``hack/llama-server/build.sh`` build them). SGLang's server needs CUDA, so
local mode refuses it. Local engines run on this machine's CPU, whatever ``engine.resources.gpus`` says.
"""

from __future__ import annotations

import os
import shutil

from shoal.engine_kinds import EngineSettings, adapter
from shoal.engine_kinds.vllm import KV_EVENTS_FLAG
from shoal.fetch import cached_path, default_download_dir
from shoal.operator.quantity import quantity_bytes
from shoal.operator.spec import InferenceDeploymentSpec

BINARY_ENV = {"vllm": "SHOAL_VLLM", "llamacpp": "SHOAL_LLAMA_SERVER"}
LOCAL_KINDS = ("shoal", *BINARY_ENV)


class EngineBinaryMissing(ValueError):
    """The kind's server is not on this machine; the message says where it was looked for."""


def engine_binary(kind: str) -> str:
    """The path of ``kind``'s server binary (kinds other than shoal), or an error naming the kind and where
    it was looked for."""
    if kind not in BINARY_ENV:
        raise EngineBinaryMissing(
            f"spec.engine.kind {kind}: shoal up runs engine kinds {', '.join(LOCAL_KINDS)} (SGLang's server needs CUDA)"
        )
    variable, name = BINARY_ENV[kind], adapter(kind).binary
    given = os.environ.get(variable)
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise EngineBinaryMissing(f"spec.engine.kind {kind}: {variable}={given} is not an executable file")
        return given
    found = shutil.which(name)
    if found is None:
        raise EngineBinaryMissing(
            f"spec.engine.kind {kind}: no {name} on PATH; put it there or set {variable} to its path"
        )
    return found


def _model_path(source: str) -> str:
    """A path the engine can open: an hf:// or s3:// source where ``shoal up`` fetched it before any engine
    started, else the source as written (the manifest check admits only absolute paths for these kinds)."""
    fetched = cached_path(source, default_download_dir())
    return str(fetched) if fetched is not None else source


def foreign_argv(spec: InferenceDeploymentSpec, binary: str, threads: int) -> list[str]:
    """The kind's own command line for this machine: loopback, CPU, its binary first (``--port`` comes last,
    from the fleet, and so does the KV-event publisher's flag, each engine on a port of its own)."""
    engine = spec.engine
    settings = EngineSettings(
        model=_model_path(spec.model.source),
        served_name=spec.served_name,
        port=0,
        host="127.0.0.1",
        dtype=engine.dtype,
        block_size=engine.block_size,
        max_model_len=engine.max_model_len,
        max_num_seqs=engine.max_num_seqs,
        kv_cache_bytes=None if engine.kv_cache_memory is None else quantity_bytes(engine.kv_cache_memory),
        enforce_eager=engine.enforce_eager,
        gpus=0,
        kv_events_port=0 if adapter(engine.kind).kv_events == "zmq" else None,
        lora_modules=tuple((a.name, _model_path(a.source)) for a in spec.adapters),
        max_loras=engine.max_loras,
        max_lora_rank=engine.max_lora_rank,
    )
    argv = adapter(engine.kind).command(settings)
    for flag in ("--port", KV_EVENTS_FLAG):  # the fleet gives each engine its own ports
        if flag in argv:
            at = argv.index(flag)
            del argv[at : at + 2]
    if engine.kind == "llamacpp":
        argv += ["--threads", str(threads), "--threads-batch", str(threads)]
    return [binary, *argv[1:], *engine.extra_args]
