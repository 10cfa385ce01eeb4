"""The InferenceDeployment API (``shoal.dev/v1alpha1``) as typed models: the one source of truth.

The CRD's OpenAPI schema is generated from these models (:mod:`shoal.operator.crd`), defaults included, and the
cross-field rules the apiserver enforces are declared here as CEL ``x-kubernetes-validations`` next to the fields
they constrain. The operator parses every object it reconciles with the same models, so what the apiserver
accepted is exactly what the builders see. Field names are camelCase on the wire (Kubernetes convention) and
snake_case in Python.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict, JsonValue

from shoal import __version__
from shoal.engine_kinds import ADAPTERS, DEFAULT_KIND, EngineKind
from shoal.engine_kinds import message as refusal_message
from shoal.operator import model_source
from shoal.protocol.gateway_timeouts import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_FIRST_TOKEN_TIMEOUT_S,
    DEFAULT_INTER_TOKEN_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
)

GROUP = "shoal.dev"
VERSION = "v1alpha1"
KIND = "InferenceDeployment"
PLURAL = "inferencedeployments"
SINGULAR = "inferencedeployment"
SHORT_NAMES = ("infd",)
CATEGORIES = ("shoal",)

# Images are tagged with the package version: `make images` builds these names, the chart (appVersion) runs them.
IMAGE_REGISTRY = "ghcr.io/shoal-dev"
DEFAULT_ENGINE_IMAGE = f"{IMAGE_REGISTRY}/shoal-engine:{__version__}"
# Each kind's image when neither spec.engine.image nor the operator's --engine-image (the chart's engineImages)
# names one: upstream's own server images, (GPU build, CPU build). Shoal's runs on both; SGLang publishes no
# CPU server image, so a CPU SGLang fleet names its own.
DEFAULT_ENGINE_IMAGES: dict[str, tuple[str, str]] = {
    "shoal": (DEFAULT_ENGINE_IMAGE, DEFAULT_ENGINE_IMAGE),
    "vllm": ("vllm/vllm-openai:v0.11.0", "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.11.0"),
    "sglang": ("lmsysorg/sglang:v0.5.3", "lmsysorg/sglang:v0.5.3"),
    "llamacpp": ("ghcr.io/ggml-org/llama.cpp:server-cuda", "ghcr.io/ggml-org/llama.cpp:server"),
}
DEFAULT_GATEWAY_IMAGE = f"{IMAGE_REGISTRY}/shoal:{__version__}"
RoutingPolicy = Literal["prefix-aware", "least-load", "round-robin"]
ROUTING_POLICIES: tuple[str, ...] = get_args(RoutingPolicy)
MAX_SCALING_HISTORY = 10

Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?([EPTGMK]i?|[mkMGTPE])?$")]


def _cel(*rules: tuple[str, str]) -> ConfigDict:
    """Model config carrying CEL rules (rule, message) into the generated schema."""
    return _Wire.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}
    )


class _Wire(BaseModel):
    """Base: camelCase on the wire, unknown fields rejected (the apiserver prunes them anyway)."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True, extra="forbid", frozen=True
    )


class ModelVolume(_Wire):
    """A PersistentVolumeClaim holding model files, mounted read-only into every engine and gateway pod (so it must
    be ReadOnlyMany or ReadWriteMany when they run on several nodes). ``pvc://CLAIM/PATH`` says the same in the
    source."""

    claim_name: str = Field(min_length=1)
    mount_path: str = Field("/models", pattern=r"^/")


class ModelCache(_Wire):
    """Where an hf:// or s3:// model is fetched to, mounted at /model-cache in the engine pods."""

    model_config = _cel(
        ("has(self.hostPath) != has(self.claimName)", "spec.model.cache takes one of hostPath or claimName")
    )

    host_path: str | None = Field(
        None,
        pattern=r"^/",
        description="A directory on each node (hostPath, DirectoryOrCreate) shared by the engines on that node: a "
        "model is fetched once per node (a file lock makes concurrent fetches one download) and kept across pod "
        "restarts. It must be writable by the pods' user (uid 65532), and the namespace's Pod Security level must "
        "allow hostPath volumes (privileged).",
    )
    claim_name: str | None = Field(
        None,
        min_length=1,
        description="A PersistentVolumeClaim every engine pod mounts read-write: it must be ReadWriteMany when "
        "several engine pods share it (any fleet of more than one engine, unless all run on one node).",
    )

    @model_validator(mode="after")
    def _one(self) -> ModelCache:
        if (self.host_path is None) == (self.claim_name is None):
            raise ValueError("spec.model.cache takes one of hostPath or claimName")
        return self


class ModelSpec(_Wire):
    """What to serve, where it comes from, and where a fetched copy is kept."""

    model_config = _Wire.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [rule.validation() for rule in model_source.RULES]}
    )

    source: str = Field(
        min_length=1,
        max_length=1024,
        description="hf://ORG/REPO[@REVISION][/FILE.gguf] or s3://BUCKET/PREFIX (fetched by an init container "
        "into spec.model.cache), pvc://CLAIM/PATH (a path in a PersistentVolumeClaim, mounted read-only), a bundled "
        "alias (smollm2-135m), or an absolute path in the image or under volume.mountPath (a Hugging Face "
        "directory or a .gguf file).",
    )
    served_name: str | None = Field(None, min_length=1, description="Name clients use; defaults to the source.")
    volume: ModelVolume | None = Field(
        None, description="A claim mounted read-only at mountPath for an absolute-path source (pvc:// says it shorter)."
    )
    credentials_secret: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description="A Secret in this namespace whose keys (HF_TOKEN; AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_SESSION_TOKEN, AWS_REGION) become the environment of the fetch init containers only, never of the "
        "engine or gateway containers. hf:// and s3:// sources only.",
    )
    s3_endpoint: str | None = Field(
        None,
        pattern=r"^https?://",
        max_length=1024,
        description="The endpoint of an S3-compatible store (MinIO, Ceph), given to the fetcher as AWS_ENDPOINT_URL; "
        "AWS's own if unset. s3:// sources only.",
    )
    cache: ModelCache | None = Field(
        None,
        description="Where an hf:// or s3:// model is fetched to: a node directory (hostPath) or a claim (claimName). "
        "Unset: an emptyDir per pod, so every new pod fetches the model again.",
    )

    @model_validator(mode="after")
    def _source_rules(self) -> ModelSpec:
        broken = model_source.problem(self.model_dump(by_alias=True, exclude_none=True))
        if broken is not None:
            raise ValueError(broken)
        return self


class EngineResources(_Wire):
    gpus: int = Field(
        1,
        ge=0,
        description="nvidia.com/gpu per engine pod: 0 runs on the CPU, 1 on one GPU; more is tensor parallelism, "
        "for engine kinds vllm and sglang only.",
    )
    cpu: Quantity | None = Field(None, description="CPU request and limit, e.g. '4'.")
    memory: Quantity | None = Field(None, description="Memory request and limit, e.g. '16Gi'.")


class Toleration(_Wire):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class EnvVar(_Wire):
    name: str = Field(min_length=1)
    value: str = ""


class EngineSpec(_Wire):
    kind: EngineKind = Field(
        DEFAULT_KIND,
        description="The engine the pods run: shoal (Shoal's own), vllm, sglang or llamacpp (llama-server); "
        "docs/engines.md maps each field to its flags.",
    )
    image: str | None = Field(
        None, min_length=1, description="The engine image; the operator's default for the kind if unset."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    resources: EngineResources = Field(default_factory=EngineResources)
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    block_size: Literal[8, 16, 32] | None = Field(
        None, description="Tokens per KV block; the engine's own default if unset (16 for shoal)."
    )
    max_model_len: int | None = Field(None, ge=16, description="Context length cap; the model's own if unset.")
    max_num_seqs: int = Field(64, ge=1, le=4096, description="Sequences batched at once per engine.")
    kv_cache_memory: Quantity | None = Field(None, description="Memory for the paged KV cache, e.g. '8Gi'.")
    startup_seconds: int = Field(
        600, ge=30, le=7200, description="How long model loading may take before the pod is restarted."
    )
    extra_args: list[str] = Field(default_factory=list, description="Appended to the engine's command.")
    env: list[EnvVar] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)


class ReplicasSpec(_Wire):
    model_config = _cel(
        ("self.min <= self.max", "replicas.min must be less than or equal to replicas.max"),
        (
            "!has(self.count) || (self.count >= self.min && self.count <= self.max)",
            "replicas.count must lie between replicas.min and replicas.max",
        ),
    )

    min: int = Field(1, ge=0, description="Fewest engine replicas (0 allows scale to zero).")
    max: int = Field(4, ge=1, description="Most engine replicas.")
    count: int | None = Field(
        None,
        ge=0,
        description="Engine replicas while autoscaling is off (replicas.min if unset); `kubectl scale` writes it.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> ReplicasSpec:
        if self.min > self.max:
            raise ValueError("replicas.min must be less than or equal to replicas.max")
        if self.count is not None and not self.min <= self.count <= self.max:
            raise ValueError("replicas.count must lie between replicas.min and replicas.max")
        return self

    @property
    def fixed(self) -> int:
        """The replica count that holds while autoscaling is off."""
        return self.min if self.count is None else self.count


class MetricsSpec(_Wire):
    source: Literal["scrape", "prometheus"] = Field(
        "scrape", description="scrape reads every engine's /metrics; prometheus queries a Prometheus."
    )
    prometheus_url: str | None = Field(
        None, pattern=r"^https?://", description="The Prometheus to query; the operator's --prometheus-url if unset."
    )


class AutoscalingSpec(_Wire):
    enabled: bool = False
    mode: Literal["Act", "Recommend"] = Field(
        "Act", description="Act scales the engines; Recommend records each decision in the status and scales nothing."
    )
    queue_depth_per_replica: float = Field(4.0, gt=0, description="Target waiting requests per engine.")
    ttft_p95_seconds: float = Field(2.0, gt=0, description="Target P95 time to first token.")
    scale_up_stabilization_seconds: int = Field(0, ge=0, le=3600)
    scale_down_stabilization_seconds: int = Field(300, ge=0, le=3600)
    max_step: int = Field(
        2,
        ge=1,
        description="Most replicas removed in one decision, or added on a count guessed from the queue or "
        "latency; a breach sized from measured rates adds what it needs at once (panic).",
    )
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)


class SecretKeyRef(_Wire):
    """A key of a Secret in the InferenceDeployment's namespace."""

    name: str = Field(min_length=1)
    key: str = Field("api-keys", min_length=1)


class HoldQueueSpec(_Wire):
    """Requests the gateway holds while no engine is ready (scale from zero), beyond which it answers 503."""

    size: int = Field(64, ge=0, le=10000, description="Requests held per gateway; 0 answers 503 at once.")
    wait_seconds: int = Field(60, ge=1, le=3600, description="Longest a request is held before a 503.")


class GatewayTimeoutsSpec(_Wire):
    """The gateway's time limits on a request (``shoal gateway --connect-timeout`` and the others)."""

    connect_seconds: float = Field(
        DEFAULT_CONNECT_TIMEOUT_S,
        gt=0,
        le=60,
        description="To open a connection to an engine; past it, another is tried.",
    )
    first_token_seconds: float = Field(
        DEFAULT_FIRST_TOKEN_TIMEOUT_S,
        gt=0,
        le=3600,
        description=("From sending a streaming request to its first token; past it, another engine is tried or 504."),
    )
    inter_token_seconds: float = Field(
        DEFAULT_INTER_TOKEN_TIMEOUT_S,
        gt=0,
        le=3600,
        description=("Between two chunks of a stream; past it, the stream ends with an error event."),
    )
    request_seconds: float = Field(
        DEFAULT_REQUEST_TIMEOUT_S,
        gt=0,
        le=86400,
        description=("A whole request; a client may ask for less with the X-Request-Timeout header."),
    )


class GatewaySpec(_Wire):
    image: str | None = Field(
        None,
        min_length=1,
        description="The gateway image; unset: the operator's default (the chart's gatewayImage, else the "
        f"operator's own image), else {DEFAULT_GATEWAY_IMAGE}.",
    )
    replicas: int = Field(1, ge=0, le=100)
    hold_queue: HoldQueueSpec = Field(default_factory=HoldQueueSpec)
    timeouts: GatewayTimeoutsSpec = Field(default_factory=GatewayTimeoutsSpec)
    routing_policy: RoutingPolicy = "prefix-aware"
    bound_factor: float = Field(1.25, ge=1.0, le=10.0, description="Bounded-load cap relative to the mean.")
    api_key_secret: SecretKeyRef | None = Field(
        None,
        description="Secret holding the tenants file: API keys and each tenant's quotas. Unset: the operator "
        "generates one, <name>-api-keys, with one key.",
    )
    redis_url: str | None = Field(
        None, pattern=r"^rediss?://", description="Share tenant quotas across gateway replicas through this Redis."
    )


class NetworkPolicySpec(_Wire):
    """Who may reach the engines: the gateway, and Prometheus for ``/metrics``. The engine serves its API and
    ``/metrics`` on one port, so the scrapers it admits can reach both."""

    prometheus_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "prometheus"},
        description="Labels of the Prometheus pods (in any namespace) allowed to scrape the engines.",
    )


def _kind_rule(kind: str, cel: str, text: str) -> JsonDict:
    """A refusal of ``kind``'s as a rule on the whole spec: it holds for every other kind."""
    of_kind = f"(has(self.engine.kind) ? self.engine.kind : '{DEFAULT_KIND}') == '{kind}'"
    return {"rule": f"!has(self.engine) || !({of_kind}) || ({cel})", "message": text}


ENGINE_KIND_RULES: list[JsonValue] = [
    _kind_rule(kind, refusal.cel, refusal_message(kind, refusal))
    for kind, adapter in ADAPTERS.items()
    for refusal in adapter.refusals
]


class InferenceDeploymentSpec(_Wire):
    """``spec`` of an InferenceDeployment."""

    model_config = _Wire.model_config | ConfigDict(json_schema_extra={"x-kubernetes-validations": ENGINE_KIND_RULES})

    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    replicas: ReplicasSpec = Field(default_factory=ReplicasSpec)
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    gateway: GatewaySpec = Field(default_factory=GatewaySpec)
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)

    @model_validator(mode="after")
    def _kind_refusals(self) -> InferenceDeploymentSpec:
        """The engine kind's refusals, worded as the CEL rules word them."""
        broken = ADAPTERS[self.engine.kind].refused(self.model_dump(by_alias=True, exclude_none=True))
        if broken:
            raise ValueError(broken[0])
        return self

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model.source


class Condition(_Wire):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


SignalValues = dict[str, float]


class ScalingRecord(_Wire):
    """One change of the engine count (or, in Recommend mode, of the recommendation: ``applied`` false)."""

    time: str
    from_replicas: int
    to_replicas: int
    reason: str
    rule: str | None = None
    values: SignalValues | None = None
    applied: bool = True


class ScalingDecisionStatus(_Wire):
    """The autoscaler's latest evaluation, whether or not it changed anything."""

    time: str
    replicas: int
    rule: str
    message: str
    values: SignalValues = Field(default_factory=dict)
    applied: bool = True


class InferenceDeploymentStatus(_Wire):
    """``status``: written only by the operator (and, through its hook, the autoscaler)."""

    replicas: int = 0
    ready_replicas: int = 0
    desired_replicas: int = 0
    queue_depth: float | None = None
    ttft_p95_seconds: float | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    last_scale_time: str | None = None
    last_decision: ScalingDecisionStatus | None = None
    history: list[ScalingRecord] = Field(default_factory=list, max_length=MAX_SCALING_HISTORY)
    selector: str | None = None
