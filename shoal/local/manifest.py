"""An InferenceDeployment manifest read for ``shoal up``: the CRD's own typed spec, the CRD's own messages.

The spec is parsed by :class:`shoal.operator.spec.InferenceDeploymentSpec`, the models the CRD is generated
from, so a manifest ``kubectl apply`` would refuse is refused here with the same words (the cross-field rules
raise the CEL rules' messages). Fields that only mean something on a cluster (images, node placement, the
Secret holding API keys, Prometheus as the metrics source) are accepted and reported as ignored locally: the
same file must work in both places.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_snake

from shoal.fetch import SourceError, parse_source
from shoal.local.engines import EngineBinaryMissing, engine_binary
from shoal.model_registry import ModelNotFoundError, resolve_model
from shoal.operator.pod_fields import PodFields
from shoal.operator.spec import GROUP, KIND, VERSION, InferenceDeploymentSpec

API_VERSION = f"{GROUP}/{VERSION}"


class ManifestError(ValueError):
    """The manifest cannot run; the message names the file and each offending field."""


@dataclass(frozen=True)
class LocalManifest:
    """A validated InferenceDeployment and what of it ``shoal up`` leaves out."""

    name: str
    spec: InferenceDeploymentSpec
    ignored: tuple[str, ...]


def _field_errors(error: ValidationError) -> list[str]:
    """One line per error, ``spec.<path>: <message>``; the CEL rules' messages come through unchanged."""
    lines = []
    for item in error.errors():
        path = ".".join(["spec", *(str(p) for p in item["loc"])])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            lines.append(f"{path}: unknown field")
        elif item["type"] == "value_error":
            lines.append(f"{path}: {message}")
        else:
            lines.append(f"{path}: {message} (got {item.get('input')!r})")
    return lines


def cluster_only_pod_fields(fields: PodFields) -> list[str]:
    """The pod fields set in ``fields`` that only a cluster acts on (names relative to the section)."""
    placement = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName")
    notes = []
    if any(getattr(fields, to_snake(name)) for name in placement):
        notes.append(
            "nodeSelector / tolerations / affinity / priorityClassName / runtimeClassName: everything "
            "runs on this machine"
        )
    if fields.image_pull_secrets:
        notes.append("imagePullSecrets: nothing is pulled")
    if fields.pod_labels or fields.pod_annotations:
        notes.append("podLabels / podAnnotations: there are no pods")
    if fields.env_from or any(e.value_from is not None for e in fields.env):
        notes.append("envFrom / env[].valueFrom: Kubernetes objects; set the variables in this shell")
    return notes


def ignored_locally(spec: InferenceDeploymentSpec) -> list[str]:
    """The fields set in ``spec`` that only a cluster acts on, each with what happens instead."""
    engine, gateway = spec.engine, spec.gateway
    defaults = type(engine)()
    notes = []
    if engine.image != defaults.image or engine.image_pull_policy != defaults.image_pull_policy:
        notes.append("spec.engine.image / imagePullPolicy: engines run from this checkout, not an image")
    if engine.resources.gpus:
        notes.append(f"spec.engine.resources.gpus ({engine.resources.gpus}): engines run on this machine's CPU")
    if engine.gpu_memory_utilization is not None:
        notes.append("spec.engine.gpuMemoryUtilization: engines run on this machine's CPU")
    if engine.enforce_eager:
        notes.append("spec.engine.enforceEager: engines run on this machine's CPU, which never uses CUDA graphs")
    if engine.resources.memory or engine.resources.requests or engine.resources.limits:
        notes.append("spec.engine.resources.memory / requests / limits: only a CPU limit applies to local processes")
    for section, fields in (("engine", engine), ("gateway", gateway)):
        notes += [f"spec.{section}.{note}" for note in cluster_only_pod_fields(fields)]
    if any(e.value is not None for e in gateway.env) or gateway.resources != type(gateway)().resources:
        notes.append("spec.gateway.env / resources: the local gateway runs with this shell's environment, unlimited")
    if spec.model.volume is not None:
        notes.append("spec.model.volume: spec.model.source is read as a path on this machine")
    if spec.model.credentials_secret is not None:
        notes.append(
            "spec.model.credentialsSecret: a Kubernetes Secret; credentials come from this shell's environment"
        )
    if spec.engine.kernel_cache is not None:
        notes.append("spec.engine.kernelCache: compiled kernels stay in this machine's own caches")
    if spec.model.cache is not None:
        notes.append("spec.model.cache: a node's or a claim's directory on a cluster")
    if gateway.image != type(gateway)().image:
        notes.append("spec.gateway.image: the gateway runs from this checkout, not an image")
    if gateway.replicas != 1:
        notes.append(f"spec.gateway.replicas ({gateway.replicas}): one local gateway serves the fleet")
    if gateway.api_key_secret is not None:
        notes.append("spec.gateway.apiKeySecret: a Kubernetes Secret; give the tenants file with --api-keys")
    if spec.autoscaling.metrics.source == "prometheus":
        notes.append("spec.autoscaling.metrics: engines' /metrics are scraped directly, not through Prometheus")
    return [f"{note} (ignored locally)" for note in notes]


def _document(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from exc
    found = [d for d in documents if isinstance(d, dict) and d.get("kind") == KIND]
    if len(found) != 1:
        raise ManifestError(f"{path}: expected exactly one {KIND}, found {len(found)}")
    return found[0]


def load_manifest(path: str | Path) -> LocalManifest:
    """Reads and validates ``path``; raises :class:`ManifestError` with every problem in it."""
    file = Path(path)
    document = _document(file)
    problems = []
    if document.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION} (got {document.get('apiVersion')!r})")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: Required value")
    spec: InferenceDeploymentSpec | None = None
    raw_spec = document.get("spec")
    if not isinstance(raw_spec, dict):
        problems.append("spec: Required value")
    else:
        try:
            spec = InferenceDeploymentSpec.model_validate(raw_spec)
        except ValidationError as exc:
            problems.extend(_field_errors(exc))
    if spec is not None and spec.engine.kind != "shoal":
        try:
            engine_binary(spec.engine.kind)
        except EngineBinaryMissing as exc:
            problems.append(str(exc))
    if spec is not None and spec.model.source.startswith("pvc://"):
        problems.append(
            "spec.model.source: pvc:// names a PersistentVolumeClaim on a cluster; give a path on this machine"
        )
    elif spec is not None:
        try:
            if parse_source(spec.model.source) is None:  # hf:// and s3:// are fetched once the manifest is valid
                resolve_model(spec.model.source)
        except (ModelNotFoundError, SourceError) as exc:
            problems.append(f"spec.model.source: {exc}")
    if problems or spec is None:
        raise ManifestError(f"{file}: {KIND} {name or '?'} is invalid:\n" + "\n".join(f"  {p}" for p in problems))
    return LocalManifest(str(name), spec, tuple(ignored_locally(spec)))
