"""The InferenceDeployment API (``shoal.dev/v1alpha1``) as typed models: the one source of truth.

The CRD's OpenAPI schema is generated from these models (:mod:`shoal.operator.crd`), defaults included, and the
cross-field rules the apiserver enforces are declared here as CEL ``x-kubernetes-validations`` next to the fields
they constrain. The operator parses every object it reconciles with the same models, so what the apiserver
accepted is exactly what the builders see. Field names are camelCase on the wire (Kubernetes convention) and
snake_case in Python.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

from pydantic import ConfigDict, Field, model_validator
from pydantic.json_schema import JsonDict, JsonValue

from shoal import __version__
from shoal.engine_kinds import ADAPTERS, DEFAULT_KIND, EngineKind
from shoal.engine_kinds import message as refusal_message
from shoal.operator import adapters as adapter_rules
from shoal.operator import model_source
from shoal.operator.core_api import EXTENDED_RESOURCE, REQUESTS_WITHIN_LIMITS, ResourceRequirements
from shoal.operator.pod_fields import PodFields, blocking_rule
from shoal.operator.termination import GRACE_CAP_SECONDS, MIN_GRACE_SECONDS
from shoal.operator.wire import Quantity, Wire, cel
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


class ModelVolume(Wire):
    """A PersistentVolumeClaim holding model files, mounted read-only into every engine and gateway pod (so it must
    be ReadOnlyMany or ReadWriteMany when they run on several nodes). ``pvc://CLAIM/PATH`` says the same in the
    source."""

    claim_name: str = Field(min_length=1, description="The PersistentVolumeClaim, in this namespace.")
    mount_path: str = Field("/models", pattern=r"^/", description="Where the claim is mounted in the pods.")


class CacheVolume(Wire):
    """A directory the engine pods keep across restarts: a node's or a claim's, exactly one of the two."""

    FIELD: ClassVar[str]

    host_path: str | None = Field(
        None,
        pattern=r"^/",
        description="A directory on each node (hostPath, DirectoryOrCreate) shared by the engines on that node and "
        "kept across pod restarts. It must be writable by the pods' user (uid 65532), and the namespace's Pod "
        "Security level must allow hostPath volumes (privileged).",
    )
    claim_name: str | None = Field(
        None,
        min_length=1,
        description="A PersistentVolumeClaim every engine pod mounts read-write: it must be ReadWriteMany when "
        "several engine pods share it (any fleet of more than one engine, unless all run on one node).",
    )

    @model_validator(mode="after")
    def _one(self) -> CacheVolume:
        if (self.host_path is None) == (self.claim_name is None):
            raise ValueError(one_of_rule(self.FIELD)[1])
        return self


def one_of_rule(field: str) -> tuple[str, str]:
    return "has(self.hostPath) != has(self.claimName)", f"{field} takes one of hostPath or claimName"


class ModelCache(CacheVolume):
    """Where an hf:// or s3:// model is fetched to, mounted at /model-cache in the engine pods; on a node's
    directory a model is fetched once per node (a file lock makes concurrent fetches one download)."""

    FIELD = "spec.model.cache"
    model_config = cel(one_of_rule(FIELD))


class KernelCache(CacheVolume):
    """Where the engine keeps its compiled kernels (Triton's cache, TRITON_CACHE_DIR; Shoal's C kernels,
    SHOAL_CACHE), mounted at /kernel-cache: a replica that restarts or starts beside another on the node loads
    them instead of compiling them again."""

    FIELD = "spec.engine.kernelCache"
    model_config = cel(one_of_rule(FIELD))


class ModelSpec(Wire):
    """What to serve, where it comes from, and where a fetched copy is kept."""

    model_config = Wire.model_config | ConfigDict(
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
        "AWS_SESSION_TOKEN, AWS_REGION) become the environment of the fetch init containers, and of kind shoal's "
        "engine container only where it fetches spec.adapters itself; never of the gateway. hf:// and s3:// "
        "sources only.",
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


DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
GATEWAY_RESOURCES = ResourceRequirements(requests={"cpu": "100m", "memory": "256Mi"}, limits={"memory": "1Gi"})


def _shorthand_rule(name: str) -> tuple[str, str, str]:
    given = f"(has(self.requests) && '{name}' in self.requests) || (has(self.limits) && '{name}' in self.limits)"
    return (
        f"!has(self.{name}) || !({given})",
        f"engine.resources.{name} sets both the request and the limit: give {name} there or in requests/limits, "
        "not both",
        f".{name}",
    )


_ENGINE_RESOURCE_RULES = (
    _shorthand_rule("cpu"),
    _shorthand_rule("memory"),
    (
        "!has(self.gpuResourceName) || ((!has(self.requests) || !(self.gpuResourceName in self.requests)) && "
        "(!has(self.limits) || !(self.gpuResourceName in self.limits)))",
        "engine.resources.gpus sets the GPU resource: leave it out of requests and limits",
    ),
    (
        "!has(self.gpuResourceName) || !(self.gpuResourceName.startsWith('kubernetes.io/') || "
        "self.gpuResourceName.split('/')[0].endsWith('.kubernetes.io'))",
        "engine.resources.gpuResourceName must be an extended resource outside kubernetes.io, e.g. nvidia.com/gpu",
        ".gpuResourceName",
    ),
)


class EngineResources(ResourceRequirements):
    """What each engine pod asks for: its GPUs (of which resource), CPU and memory. ``cpu`` and ``memory`` set
    the request and the limit alike; ``requests`` and ``limits`` (the core API's maps) set them apart."""

    model_config = cel(REQUESTS_WITHIN_LIMITS, *_ENGINE_RESOURCE_RULES)

    gpus: int = Field(
        1,
        ge=0,
        description="GPUs (of gpuResourceName) per engine pod: 0 runs on the CPU, 1 on one GPU; more is tensor "
        "parallelism, for engine kinds vllm and sglang only.",
    )
    gpu_resource_name: str = Field(
        DEFAULT_GPU_RESOURCE,
        max_length=317,
        pattern=EXTENDED_RESOURCE,
        description="The extended resource a GPU is, as the device plugin names it: nvidia.com/gpu, amd.com/gpu, "
        "a MIG profile such as nvidia.com/mig-1g.10gb. Pods tolerate the taint of that name.",
    )
    cpu: Quantity | None = Field(None, description="CPU request and limit, e.g. '4'.")
    memory: Quantity | None = Field(None, description="Memory request and limit, e.g. '16Gi'.")

    @model_validator(mode="after")
    def _one_place_each(self) -> EngineResources:
        requests, limits = self.requests or {}, self.limits or {}
        for name in ("cpu", "memory"):
            if getattr(self, name) is not None and (name in requests or name in limits):
                raise ValueError(_shorthand_rule(name)[1])
        if self.gpu_resource_name in requests or self.gpu_resource_name in limits:
            raise ValueError(_ENGINE_RESOURCE_RULES[2][1])
        domain = self.gpu_resource_name.split("/")[0]
        if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
            raise ValueError(_ENGINE_RESOURCE_RULES[3][1])
        return self

    def container(self) -> dict[str, dict[str, str]]:
        """The engine container's ``resources``: the shorthands, the maps, and the GPUs (request = limit, as
        the core API requires of an extended resource)."""
        shorthand = {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v is not None}
        gpus = {self.gpu_resource_name: str(self.gpus)} if self.gpus else {}
        requests = {**shorthand, **(self.requests or {}), **gpus}
        limits = {**shorthand, **(self.limits or {}), **gpus}
        return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}

    @property
    def cpu_limit(self) -> Quantity | None:
        """The engine container's CPU limit, if it has one."""
        return self.cpu or (self.limits or {}).get("cpu")


class EngineSpec(PodFields):
    """The engine pods: which server, its image, model-serving settings, resources and pod placement."""

    kind: EngineKind = Field(
        DEFAULT_KIND,
        description="The engine the pods run: shoal (Shoal's own), vllm, sglang or llamacpp (llama-server); "
        "docs/engines.md maps each field to its flags.",
    )
    image: str | None = Field(
        None, min_length=1, description="The engine image; the operator's default for the kind if unset."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="When the kubelet pulls the engine image (and the fetch container's)."
    )
    resources: EngineResources = Field(
        default_factory=EngineResources, description="GPUs, CPU and memory per engine pod."
    )
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="The weights' and activations' type; auto picks what the device runs fastest."
    )
    block_size: Literal[8, 16, 32] | None = Field(
        None, description="Tokens per KV block; the engine's own default if unset (16 for shoal)."
    )
    max_model_len: int | None = Field(None, ge=16, description="Context length cap; the model's own if unset.")
    max_num_seqs: int = Field(64, ge=1, le=4096, description="Sequences batched at once per engine.")
    kv_cache_memory: Quantity | None = Field(
        None, description="Memory for the paged KV cache, e.g. '8Gi'; overrides gpuMemoryUtilization."
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="The fraction of the GPU's memory an engine may use, in (0, 1]; the KV cache takes what the "
        "weights and activations leave of it (vLLM's --gpu-memory-utilization; the engine's default if unset, "
        "0.9 for shoal and vllm). No effect on a CPU.",
    )
    enforce_eager: bool = Field(
        False,
        description="Run every step eagerly (vLLM's --enforce-eager): no CUDA graphs for decode steps, which the "
        "engine otherwise captures at start-up on a GPU. No effect on a CPU.",
    )
    kernel_cache: KernelCache | None = Field(
        None,
        description="A node directory (hostPath) or a claim (claimName) for compiled kernels that outlives the pod; "
        "unset: the pod's scratch emptyDir, so every new pod compiles them again.",
    )
    startup_seconds: int = Field(
        600, ge=30, le=7200, description="How long model loading may take before the pod is restarted."
    )
    termination_grace_period_seconds: int | None = Field(
        None,
        ge=MIN_GRACE_SECONDS,
        le=GRACE_CAP_SECONDS,
        description="How long a stopping engine pod may take (preStop, drain, exit); sized from maxModelLen and "
        "the time per output token if unset (docs/operator.md, Lossless scale-in).",
    )
    extra_args: list[str] = Field(default_factory=list, description="Appended to the engine's command.")
    max_loras: int | None = Field(
        None,
        ge=1,
        le=adapter_rules.MAX_ADAPTERS,
        description="Adapter slots per engine: the most spec.adapters one batch mixes (vLLM's --max-loras); "
        f"unset: {adapter_rules.RUNTIME_SLOTS} for kind shoal (whose list changes at run time), one per adapter for "
        "vllm. With spec.adapters only.",
    )
    max_lora_rank: int | None = Field(
        None,
        ge=1,
        le=512,
        description="The highest adapter rank an engine accepts; each slot is sized for it (vLLM's "
        "--max-lora-rank; the engine's default if unset, 16 for shoal and vllm). With spec.adapters only.",
    )


class ReplicasSpec(Wire):
    """How many engines: the bounds the autoscaler keeps to, and the count while it is off."""

    model_config = cel(
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


class MetricsSpec(Wire):
    """Where the autoscaler reads the engines' load from."""

    source: Literal["scrape", "prometheus"] = Field(
        "scrape", description="scrape reads every engine's /metrics; prometheus queries a Prometheus."
    )
    prometheus_url: str | None = Field(
        None, pattern=r"^https?://", description="The Prometheus to query; the operator's --prometheus-url if unset."
    )


class PredictiveSpec(Wire):
    """The predictive floor: replicas held for the arrival rate forecast one replica start-up ahead."""

    enabled: bool = Field(
        False,
        description="Hold the replicas the forecast arrival rate needs as a floor (it only raises the count); "
        "the forecast is in every decision's values.",
    )
    season_seconds: int = Field(
        86400,
        ge=600,
        le=2419200,
        description="Length of the load's repeating shape, learned from the autoscaler's own history: 86400 (a "
        "day, by UTC time of day) or 604800 (a week). No forecast before one whole season has been seen.",
    )


class AutoscalingSpec(Wire):
    """The autoscaler: its targets and how fast it may move (docs/autoscaling.md)."""

    enabled: bool = Field(False, description="Let the autoscaler own the engine count (within replicas.min and max).")
    mode: Literal["Act", "Recommend"] = Field(
        "Act", description="Act scales the engines; Recommend records each decision in the status and scales nothing."
    )
    queue_depth_per_replica: float = Field(4.0, gt=0, description="Target waiting requests per engine.")
    ttft_p95_seconds: float = Field(2.0, gt=0, description="Target P95 time to first token.")
    scale_up_stabilization_seconds: int = Field(
        0, ge=0, le=3600, description="A scale-up takes the lowest count wanted over this window (0: at once)."
    )
    scale_down_stabilization_seconds: int = Field(
        300, ge=0, le=3600, description="A scale-down takes the highest count wanted over this window."
    )
    max_step: int = Field(
        2,
        ge=1,
        description="Most replicas removed in one decision, or added on a count guessed from the queue or "
        "latency; a breach sized from measured rates adds what it needs at once (panic).",
    )
    burst_memory_seconds: int = Field(
        1800,
        ge=0,
        le=86400,
        description="After a burst outran the replicas' start-up, keep the size it needed this long (renewed "
        "while bursts as large come back), so a recurring burst finds it ready; once it has come back, the size "
        "is kept only from a start-up before its next return is due; 0 forgets at once, for load whose bursts "
        "do not recur.",
    )
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, description="Where the engines' load is read.")
    predictive: PredictiveSpec = Field(
        default_factory=PredictiveSpec, description="The predictive floor (off unless enabled)."
    )
    standby: int = Field(
        0,
        ge=0,
        description="Engines kept started, loaded and warm but not routed, unseen by the policy: a scale-up "
        "promotes them first (listed in about a second) and new ones refill the pool. They cost what serving "
        "engines cost. At most replicas.max; with autoscaling.enabled only. On a cluster the engine Deployment "
        "runs desired + standby pods and the operator labels the pool's shoal.dev/pool=standby, outside the "
        "engine Service (status.standbyReplicas, the StandbyPool condition).",
    )


class SecretKeyRef(Wire):
    """A key of a Secret in the InferenceDeployment's namespace."""

    name: str = Field(min_length=1, description="The Secret's name.")
    key: str = Field("api-keys", min_length=1, description="The key holding the tenants file.")


class HoldQueueSpec(Wire):
    """Requests the gateway holds while no engine is ready (scale from zero), beyond which it answers 503."""

    size: int = Field(64, ge=0, le=10000, description="Requests held per gateway; 0 answers 503 at once.")
    wait_seconds: int = Field(60, ge=1, le=3600, description="Longest a request is held before a 503.")


class GatewayTimeoutsSpec(Wire):
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


_GATEWAY_BLOCKING = (
    "gateway.podDisruptionBudget.minAvailable must be less than gateway.replicas: a budget that keeps every "
    "gateway up blocks every eviction, so node drains never finish"
)


class GatewaySpec(PodFields):
    """The gateway pods: image, replicas, routing, auth, quotas and time limits, resources and pod placement."""

    model_config = cel(
        (
            f"!has(self.podDisruptionBudget) || ({blocking_rule('self.podDisruptionBudget', 'self.replicas')})",
            _GATEWAY_BLOCKING,
            ".podDisruptionBudget.minAvailable",
        )
    )

    image: str | None = Field(
        None,
        min_length=1,
        description="The gateway image; unset: the operator's default (the chart's gatewayImage, else the "
        f"operator's own image), else {DEFAULT_GATEWAY_IMAGE}.",
    )
    replicas: int = Field(1, ge=0, le=100, description="Gateway pods; each routes to every engine.")
    resources: ResourceRequirements = Field(
        default_factory=lambda: GATEWAY_RESOURCES,
        description="Requests and limits of the gateway container (the core API's resources): 100m CPU and 256Mi "
        "requested, 1Gi memory limit, unless set.",
    )
    hold_queue: HoldQueueSpec = Field(
        default_factory=HoldQueueSpec, description="Requests held while no engine is ready (scale from zero)."
    )
    timeouts: GatewayTimeoutsSpec = Field(
        default_factory=GatewayTimeoutsSpec, description="The gateway's time limits on a request."
    )
    routing_policy: RoutingPolicy = Field(
        "prefix-aware",
        description="How a request picks its engine: prefix-aware (the engine caching most of its prompt, under "
        "the load bound), least-load, or round-robin.",
    )
    bound_factor: float = Field(1.25, ge=1.0, le=10.0, description="Bounded-load cap relative to the mean.")
    api_key_secret: SecretKeyRef | None = Field(
        None,
        description="Secret holding the tenants file: API keys and each tenant's quotas. Unset: the operator "
        "generates one, <name>-api-keys, with one key.",
    )
    redis_url: str | None = Field(
        None, pattern=r"^rediss?://", description="Share tenant quotas across gateway replicas through this Redis."
    )


class NetworkPolicySpec(Wire):
    """Who may reach the engines: the gateway, and Prometheus for ``/metrics``. The engine serves its API and
    ``/metrics`` on one port, so the scrapers it admits can reach both."""

    prometheus_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "prometheus"},
        description="Labels of the Prometheus pods (in any namespace) allowed to scrape the engines.",
    )


class AdapterSpec(Wire):
    """One LoRA adapter of the served model, loaded by every engine (docs/lora.md)."""

    model_config = Wire.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [rule.validation() for rule in adapter_rules.SOURCE_RULES]}
    )

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=adapter_rules.NAME,
        description="The model name a request sends to use the adapter; unique, and not the served model's name.",
    )
    source: str = Field(
        min_length=1,
        max_length=1024,
        description=f"The adapter's PEFT directory: {adapter_rules.FORMS} (under /model-cache, the model's claim, or "
        "in the image). hf:// and s3:// are fetched into spec.model.cache (kind shoal: by the engine; vllm: by an "
        "init container), with spec.model.credentialsSecret and s3Endpoint.",
    )

    @model_validator(mode="after")
    def _source_rules(self) -> AdapterSpec:
        broken = model_source.problem(self.model_dump(by_alias=True), adapter_rules.SOURCE_RULES)
        if broken is not None:
            raise ValueError(broken)
        return self


def _kind_rule(kind: str, cel: str, text: str) -> JsonDict:
    """A refusal of ``kind``'s as a rule on the whole spec: it holds for every other kind."""
    of_kind = f"(has(self.engine.kind) ? self.engine.kind : '{DEFAULT_KIND}') == '{kind}'"
    return {"rule": f"!has(self.engine) || !({of_kind}) || ({cel})", "message": text}


ENGINE_BLOCKING = (
    "engine.podDisruptionBudget.minAvailable must be less than replicas.max: a budget that keeps every engine up "
    "blocks every eviction, so node drains never finish"
)
STANDBY_ABOVE_MAX = (
    "autoscaling.standby must not exceed replicas.max: the pool is there to add engines up to the fleet's largest "
    "size, and a bigger one would be paid for and never promoted"
)
STANDBY_WITHOUT_AUTOSCALING = (
    "autoscaling.standby needs autoscaling.enabled: only the autoscaler's scale-ups promote standby engines"
)
ENGINE_KIND_RULES: list[JsonValue] = [
    _kind_rule(kind, refusal.cel, refusal_message(kind, refusal))
    for kind, adapter in ADAPTERS.items()
    for refusal in adapter.refusals
]


class InferenceDeploymentSpec(Wire):
    """``spec`` of an InferenceDeployment."""

    model_config = Wire.model_config | ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *ENGINE_KIND_RULES,
                {
                    "rule": "!has(self.engine) || !has(self.engine.podDisruptionBudget) || "
                    f"({blocking_rule('self.engine.podDisruptionBudget', 'self.replicas.max')})",
                    "message": ENGINE_BLOCKING,
                    "fieldPath": ".engine.podDisruptionBudget.minAvailable",
                },
                {
                    "rule": "self.autoscaling.standby <= self.replicas.max",
                    "message": STANDBY_ABOVE_MAX,
                    "fieldPath": ".autoscaling.standby",
                },
                {
                    "rule": "self.autoscaling.standby == 0 || self.autoscaling.enabled",
                    "message": STANDBY_WITHOUT_AUTOSCALING,
                    "fieldPath": ".autoscaling.standby",
                },
                *(rule.validation() for rule in adapter_rules.LIST_RULES),
                {"rule": adapter_rules.SLOTS_RULE[0], "message": adapter_rules.SLOTS_RULE[1], "fieldPath": ".engine"},
            ]
        }
    )

    model: ModelSpec = Field(description="What to serve and where it comes from.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="The engine pods.")
    replicas: ReplicasSpec = Field(default_factory=ReplicasSpec, description="How many engine pods.")
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec, description="The autoscaler.")
    gateway: GatewaySpec = Field(default_factory=GatewaySpec, description="The gateway pods in front of the engines.")
    network_policy: NetworkPolicySpec = Field(
        default_factory=NetworkPolicySpec, description="Who may reach the engines."
    )
    adapters: list[AdapterSpec] = Field(
        default_factory=list,
        max_length=adapter_rules.MAX_ADAPTERS,
        description="LoRA adapters of the model, each served under its own name by every engine. Kind shoal: "
        "loaded at start from a ConfigMap and by the operator at run time, so a change rolls no engine; vllm: on "
        "its command line, so a change rolls the engines (docs/lora.md). Engine kinds shoal and vllm.",
    )

    @model_validator(mode="after")
    def _kind_refusals(self) -> InferenceDeploymentSpec:
        """The engine kind's refusals, worded as the CEL rules word them."""
        broken = ADAPTERS[self.engine.kind].refused(self.model_dump(by_alias=True, exclude_none=True))
        if broken:
            raise ValueError(broken[0])
        return self

    @model_validator(mode="after")
    def _adapter_list(self) -> InferenceDeploymentSpec:
        """Adapter names unique and not the model's; slot sizes only with adapters."""
        broken = adapter_rules.problem([a.name for a in self.adapters], self.served_name)
        if broken is not None:
            raise ValueError(broken)
        sized = self.engine.max_loras is not None or self.engine.max_lora_rank is not None
        if sized and not self.adapters:
            raise ValueError(adapter_rules.SLOTS_RULE[1])
        return self

    @model_validator(mode="after")
    def _standby_pool(self) -> InferenceDeploymentSpec:
        """A pool no scale-up could use is refused, in the CEL rules' words."""
        if self.autoscaling.standby > self.replicas.max:
            raise ValueError(STANDBY_ABOVE_MAX)
        if self.autoscaling.standby and not self.autoscaling.enabled:
            raise ValueError(STANDBY_WITHOUT_AUTOSCALING)
        return self

    @model_validator(mode="after")
    def _evictable(self) -> InferenceDeploymentSpec:
        """A disruption budget that keeps every pod up would block every node drain."""
        if self.engine.pod_disruption_budget.blocks_evictions(self.replicas.max):
            raise ValueError(ENGINE_BLOCKING)
        if self.gateway.pod_disruption_budget.blocks_evictions(self.gateway.replicas):
            raise ValueError(_GATEWAY_BLOCKING)
        return self

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model.source


class Condition(Wire):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


SignalValues = dict[str, float]


class ScalingRecord(Wire):
    """One change of the engine count (or, in Recommend mode, of the recommendation: ``applied`` false)."""

    time: str
    from_replicas: int
    to_replicas: int
    reason: str
    rule: str | None = None
    values: SignalValues | None = None
    applied: bool = True


class ScalingDecisionStatus(Wire):
    """The autoscaler's latest evaluation, whether or not it changed anything."""

    time: str
    replicas: int
    rule: str
    message: str
    values: SignalValues = Field(default_factory=dict)
    applied: bool = True


class AdapterStatus(Wire):
    """One adapter of ``spec.adapters``: loaded on ``loadedReplicas`` of the ``replicas`` engine pods."""

    name: str
    loaded_replicas: int = Field(description="Ready engine pods that loaded it.")
    replicas: int = Field(description="Engine pods (not terminating).")


class InferenceDeploymentStatus(Wire):
    """``status``: written only by the operator (and, through its hook, the autoscaler)."""

    served_name: str | None = Field(None, description="The model name clients use (the MODEL column).")
    replicas: int = 0
    ready_replicas: int = 0
    desired_replicas: int = 0
    standby_replicas: int | None = Field(
        None,
        description="Engine pods in the standby pool (autoscaling.standby): running and costing, never routed, "
        "not counted in replicas or readyReplicas.",
    )
    queue_depth: float | None = None
    ttft_p95_seconds: float | None = None
    tpot_p90_seconds: float | None = Field(
        None,
        description="The last observed P90 time per output token (the engines' inter-token latency): what the "
        "termination grace must allow for maxModelLen tokens (the DrainFits condition).",
    )
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    last_scale_time: str | None = None
    last_decision: ScalingDecisionStatus | None = None
    history: list[ScalingRecord] = Field(default_factory=list, max_length=MAX_SCALING_HISTORY)
    selector: str | None = None
    adapters: list[AdapterStatus] | None = Field(None, description="Per adapter of spec.adapters, where it is loaded.")
