"""What Shoal needs to know about one engine kind, as data: how to start it, how to tell it is ready, which
fields of ``spec.engine`` it cannot honour, and where its ``/metrics`` page keeps the signals the autoscaler and
the gateway read.

An adapter is pure (no I/O, no torch): the operator builds a pod from it, ``shoal up`` a process, the gateway a
health check and the autoscaler a page parser or PromQL, all from the same table (``docs/engines.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from shoal.protocol.block_hash import DEFAULT_BLOCK_SIZE

KVEventsForm = Literal["sse", "zmq"]  # Shoal's GET /kv/events; vLLM's ZMQ publisher (shoal.engine_kinds.vllm)


@dataclass(frozen=True)
class EngineSettings:
    """The engine fields of an InferenceDeployment (or a local manifest), resolved: ``None`` is "the engine's own
    default". ``model`` is what the engine loads (a path, or what its own loader resolves), ``download_dir`` where
    a fetched model was put."""

    model: str
    served_name: str
    port: int
    host: str = "0.0.0.0"
    dtype: str = "auto"
    block_size: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    kv_cache_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool = False  # no CUDA graphs (vLLM's --enforce-eager)
    gpus: int = 0
    download_dir: str | None = None
    kv_events_port: int | None = None  # where a kind that publishes its KV cache over ZMQ (vLLM) binds it
    lora_modules: tuple[tuple[str, str], ...] = ()  # LoRA adapters loaded at start: (name, path)
    lora_modules_file: str | None = None  # Shoal's: adapters loaded at start from a file, changed at run time
    max_loras: int | None = None  # adapter slots; one per adapter if unset
    max_lora_rank: int | None = None
    shutdown_grace_s: int | None = None  # how long the engine drains on SIGTERM (shoal's --shutdown-grace)
    weights_cache_dir: str | None = None  # Shoal's: where converted weights are kept for the next start


@dataclass(frozen=True)
class MetricMap:
    """An engine's series for each signal: Prometheus family names (a counter's without ``_total``, a histogram's
    without ``_bucket``); ``None`` where the engine exports nothing that means it (the signal is then missing,
    never zero). ``kv_usage`` is a 0-1 ratio in every engine that has it."""

    waiting: str
    running: str
    kv_usage: str | None
    ttft: str | None
    finished: str | None
    generated: str | None
    prefix_hit_tokens: str | None
    prefix_query_tokens: str | None
    max_num_seqs: str | None = None
    rejected: tuple[str, str, str] | None = None  # (counter, label, value): requests turned away, unmet demand
    itl: str | None = None  # inter-token latency histogram: the time per output token a drain must allow

    def families(self) -> tuple[str, ...]:
        """Every series named, for the docs' table and the parser's filter."""
        named = (
            self.waiting,
            self.running,
            self.kv_usage,
            self.ttft,
            self.finished,
            self.generated,
            self.prefix_hit_tokens,
            self.prefix_query_tokens,
            self.max_num_seqs,
            self.rejected[0] if self.rejected else None,
            self.itl,
        )
        return tuple(n for n in named if n is not None)


@dataclass(frozen=True)
class Refusal:
    """A field this kind cannot honour, refused at admission. ``cel`` and ``check`` say the same thing: on the
    spec (``self`` in CEL; the spec's wire dict in Python), true when the field is acceptable."""

    field: str
    cel: str
    check: Callable[[dict[str, dict[str, object]]], bool]
    why: str


@dataclass(frozen=True)
class EngineAdapter:
    """One engine kind. ``command`` is the argv (the binary first) for ``settings``; ``ready_path`` answers 200
    only once the model is loaded, ``live_path`` while the process is sound."""

    kind: str
    binary: str
    ready_path: str
    live_path: str
    metrics: MetricMap
    command: Callable[[EngineSettings], list[str]]
    refusals: tuple[Refusal, ...] = field(default_factory=tuple)
    kv_events: KVEventsForm | None = None  # how it publishes its prefix cache (the gateway follows each replica's)
    gateway_validates: bool = False  # the gateway's request models are this engine's (else the engine judges)
    image_binary: str | None = None  # the binary's path in the kind's images when it is not on their PATH
    default_block_size: tuple[int, int] = (DEFAULT_BLOCK_SIZE, DEFAULT_BLOCK_SIZE)  # its own, (on a GPU, on a CPU)

    def block_size(self, given: int | None, gpus: int) -> int:
        """The KV block size the engine runs with (``blockSize``, else its own default on that device): the one
        the gateway hashes prompts with."""
        return given or self.default_block_size[0 if gpus else 1]

    def refused(self, spec: dict[str, dict[str, object]]) -> list[str]:
        """The messages of the refusals ``spec`` (the spec's wire dict, camelCase) breaks."""
        return [message(self.kind, r) for r in self.refusals if not r.check(spec)]


def message(kind: str, refusal: Refusal) -> str:
    """How a refusal is worded, by the apiserver and by ``shoal up`` alike."""
    return f"engine.kind {kind} cannot honour spec.{refusal.field}: {refusal.why}"


def engine_field(spec: dict[str, dict[str, object]], name: str) -> object:
    """``spec.engine.<name>`` from the wire dict (``None`` when unset)."""
    return (spec.get("engine") or {}).get(name)


def gpus(spec: dict[str, dict[str, object]]) -> int:
    resources = engine_field(spec, "resources")
    value = resources.get("gpus", 1) if isinstance(resources, dict) else 1
    return int(value) if isinstance(value, int) else 1


def unset(name: str, why: str) -> Refusal:
    """``spec.engine.<name>`` must be left unset for this kind."""
    return Refusal(f"engine.{name}", f"!has(self.engine.{name})", lambda s: engine_field(s, name) is None, why)


def at_most_one_gpu(why: str) -> Refusal:
    return Refusal(
        "engine.resources.gpus",
        "!has(self.engine.resources) || !has(self.engine.resources.gpus) || self.engine.resources.gpus <= 1",
        lambda s: gpus(s) <= 1,
        why,
    )


def dtype_auto(why: str) -> Refusal:
    return Refusal(
        "engine.dtype",
        "!has(self.engine.dtype) || self.engine.dtype == 'auto'",
        lambda s: engine_field(s, "dtype") in (None, "auto"),
        why,
    )


def no_bundled_alias(kind: str) -> Refusal:
    """Other engines read a path: a fetched source (hf://, s3://) becomes one before they start, the bundled
    aliases are Shoal's engine's own."""
    return Refusal(
        "model.source",
        "self.model.source.startsWith('/') || self.model.source.startsWith('pvc://') || "
        "self.model.source.startsWith('hf://') || self.model.source.startsWith('s3://')",
        lambda s: str((s.get("model") or {}).get("source", "")).startswith(("/", "pvc://", "hf://", "s3://")),
        f"{kind} serves an absolute path, pvc://CLAIM/PATH, or a fetched hf:// or s3:// source; "
        "the bundled aliases are resolved by Shoal's engine only",
    )


def no_adapters(why: str) -> Refusal:
    """``spec.adapters`` must be empty for this kind."""
    return Refusal("adapters", "!has(self.adapters) || size(self.adapters) == 0", lambda s: not s.get("adapters"), why)


def lora_args(
    s: EngineSettings,
    slots: str = "--max-loras",
    modules: str = "--lora-modules",
    enable: tuple[str, ...] = ("--enable-lora",),
) -> list[str]:
    """The LoRA flags (vLLM's names by default, which Shoal's engine shares): every adapter loaded at start as
    ``NAME=PATH``, a slot each unless ``max_loras`` says fewer; LoRA is on too with a ``lora_modules_file``."""
    if not s.lora_modules and s.lora_modules_file is None:
        return []
    args = [*enable, slots, str(s.max_loras or len(s.lora_modules)), *optional("--max-lora-rank", s.max_lora_rank)]
    if s.lora_modules:
        args += [modules, *(f"{name}={path}" for name, path in s.lora_modules)]
    return args


def optional(flag: str, value: object | None) -> list[str]:
    return [] if value is None else [flag, str(value)]


def flag(name: str, on: bool) -> list[str]:
    """A switch given only when on."""
    return [name] if on else []


def not_true(name: str, why: str) -> Refusal:
    """``spec.engine.<name>``, a switch, must not be turned on for this kind (false is its default)."""
    return Refusal(
        f"engine.{name}",
        f"!has(self.engine.{name}) || !self.engine.{name}",
        lambda s: not engine_field(s, name),
        why,
    )
