"""Specs the apiserver itself rejects (schema and CEL rules generated from the models), with clear messages."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from operator_harness import REPO, apply, example
from support.kube_testbed import ControlPlane

pytestmark = pytest.mark.kube


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"replicas": {"min": 3, "max": 2}},
            'spec.replicas: Invalid value: "object": replicas.min must be less than or equal to replicas.max',
        ),
        (
            {"replicas": {"min": 1, "max": 2, "count": 4}},
            "replicas.count must lie between replicas.min and replicas.max",
        ),
        (
            {"replicas": {"min": -1}},
            "spec.replicas.min: Invalid value: -1: spec.replicas.min in body should be greater than or equal to 0",
        ),
        (
            {"gateway": {"routingPolicy": "fastest"}},
            'spec.gateway.routingPolicy: Unsupported value: "fastest": supported values: "prefix-aware", '
            '"least-load", "round-robin"',
        ),
        ({"autoscaling": {"ttftP95Seconds": 0}}, "spec.autoscaling.ttftP95Seconds: Invalid value: 0"),
        (
            {"autoscaling": {"mode": "Sometimes"}},
            'spec.autoscaling.mode: Unsupported value: "Sometimes": supported values: "Act", "Recommend"',
        ),
        (
            {"autoscaling": {"predictive": {"enabled": True, "seasonSeconds": 60}}},
            "spec.autoscaling.predictive.seasonSeconds: Invalid value: 60: spec.autoscaling.predictive.seasonSeconds "
            "in body should be greater than or equal to 600",
        ),
        (
            {"replicas": {"min": 1, "max": 2}, "autoscaling": {"enabled": True, "standby": 3}},
            'spec.autoscaling.standby: Invalid value: "object": autoscaling.standby must not exceed replicas.max',
        ),
        (
            {"autoscaling": {"standby": 1}},
            'spec.autoscaling.standby: Invalid value: "object": autoscaling.standby needs autoscaling.enabled',
        ),
        ({"model": None}, "spec.model: Required value"),
        (
            {"engine": {"resources": {"gpus": 2}}},
            "engine.kind shoal cannot honour spec.engine.resources.gpus: more than 1 GPU: Shoal's engine runs a "
            "model on one GPU",
        ),
        (
            {"engine": {"gpuMemoryUtilization": 0}},
            "spec.engine.gpuMemoryUtilization: Invalid value: 0: spec.engine.gpuMemoryUtilization in body should be "
            "greater than 0",
        ),
        (
            {"engine": {"gpuMemoryUtilization": 1.5}},
            "spec.engine.gpuMemoryUtilization: Invalid value: 1.5: spec.engine.gpuMemoryUtilization in body should "
            "be less than or equal to 1",
        ),
    ],
    ids=[
        "min-over-max",
        "count-out-of-bounds",
        "negative-replicas",
        "unknown-policy",
        "zero-ttft-target",
        "unknown-autoscaling-mode",
        "season-too-short",
        "standby-above-max",
        "standby-without-autoscaling",
        "missing-model",
        "gpus-beyond-one",
        "zero-gpu-memory-utilization",
        "gpu-memory-utilization-over-one",
    ],
)
def test_apiserver_rejects(installed_chart: ControlPlane, spec: dict[str, Any], message: str) -> None:
    body = example("invalid", **spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    result = apply(installed_chart, "default", body)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert installed_chart.kubectl("get", "infd", "invalid", "-n", "default", check=False).returncode != 0


def test_valid_example_is_accepted_and_defaulted(installed_chart: ControlPlane) -> None:
    result = installed_chart.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        "default",
        "-o",
        "yaml",
        "-f",
        str(REPO / "examples" / "smollm2-cpu.yaml"),
        "-f",
        str(REPO / "examples" / "llama-gpu.yaml"),
    )
    assert result.returncode == 0, result.stderr
    assert "kind: shoal" in result.stdout and "scaleDownStabilizationSeconds: 300" in result.stdout


@pytest.mark.parametrize(
    "model",
    [
        {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        {"source": "gs://bucket/llama"},
        {"source": "hf://org"},
        {"source": "s3://Bad_Bucket/llama"},
        {"source": "models/llama.gguf"},
        {"source": "smollm2-135m", "credentialsSecret": "hub-token"},
        {"source": "hf://org/model", "s3Endpoint": "http://minio:9000"},
        {"source": "/models/llama", "cache": {"hostPath": "/var/lib/shoal/models"}},
        {"source": "pvc://weights/llama", "volume": {"claimName": "weights"}},
    ],
    ids=[
        "unqualified-repo-id",
        "unknown-scheme",
        "hf-without-repo",
        "bad-bucket",
        "relative-path",
        "secret-on-alias",
        "endpoint-on-hf",
        "cache-on-path",
        "volume-on-pvc",
    ],
)
def test_a_bad_model_source_is_refused_naming_the_field(installed_chart: ControlPlane, model: dict[str, Any]) -> None:
    """The CRD's CEL rules refuse it in the words the pydantic model uses (``shoal up`` and the operator)."""
    from pydantic import ValidationError

    from shoal.operator.spec import InferenceDeploymentSpec

    with pytest.raises(ValidationError) as refused:
        InferenceDeploymentSpec.model_validate({"model": model})
    words = str(refused.value.errors()[0]["msg"]).removeprefix("Value error, ")
    result = apply(installed_chart, "default", example("bad-source", model=model))
    assert result.returncode != 0
    assert f'spec.model: Invalid value: "object": {words}' in result.stderr, result.stderr
    assert words.startswith("spec.model.")


def test_the_hf_suggestion_quotes_the_source(installed_chart: ControlPlane) -> None:
    result = apply(installed_chart, "default", example("unqualified", model={"source": "Qwen/Qwen3-8B"}))
    assert (
        "spec.model.source 'Qwen/Qwen3-8B' looks like a Hugging Face repo id: write hf://Qwen/Qwen3-8B" in result.stderr
    ), result.stderr


def test_every_source_kind_is_accepted(installed_chart: ControlPlane) -> None:
    models = [
        {
            "source": "hf://meta-llama/Llama-3.1-8B-Instruct@main",
            "credentialsSecret": "hub",
            "cache": {"hostPath": "/var/lib/shoal/models"},
        },
        {"source": "hf://bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q4_K_M.gguf"},
        {
            "source": "s3://models/llama-3.1-8b/",
            "s3Endpoint": "http://minio.store:9000",
            "cache": {"claimName": "models"},
        },
        {"source": "pvc://weights/llama-3.1-8b"},
        {"source": "/models/llama", "volume": {"claimName": "weights"}},
    ]
    for i, model in enumerate(models):
        body = example(f"source-{i}", model=model)
        result = installed_chart.kubectl(
            "apply", "--dry-run=server", "-n", "default", "-f", "-", input=yaml.safe_dump(body), check=False
        )
        assert result.returncode == 0, (model, result.stderr)


NODE_TERM = {"matchExpressions": [{"key": "gpu", "operator": "In"}]}


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (
            {
                "engine": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_TERM]}
                        }
                    }
                }
            },
            "spec.engine.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0]",
            "operator In and NotIn need values",
        ),
        (
            {"gateway": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}}},
            "spec.gateway.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
            "Field required",
        ),
        (
            {"engine": {"resources": {"gpus": 0, "requests": {"memory": "8Gi"}, "limits": {"memory": "4Gi"}}}},
            "spec.engine.resources.requests",
            "every request must be less than or equal to its limit",
        ),
        (
            {"gateway": {"resources": {"limits": {"memory": "lots"}}}},
            "spec.gateway.resources.limits.memory",
            "String should match pattern",
        ),
        (
            {"engine": {"resources": {"gpus": 0, "requests": {"gpu": "1"}}}},
            "spec.engine.resources.requests",
            "String should match pattern",
        ),
        (
            {"engine": {"resources": {"gpuResourceName": "gpu"}}},
            "spec.engine.resources.gpuResourceName",
            "String should match pattern",
        ),
        (
            {"engine": {"resources": {"gpuResourceName": "kubernetes.io/gpu"}}},
            "spec.engine.resources.gpuResourceName",
            "engine.resources.gpuResourceName must be an extended resource outside kubernetes.io",
        ),
        (
            {"engine": {"resources": {"gpus": 0, "cpu": "2", "limits": {"cpu": "4"}}}},
            "spec.engine.resources.cpu",
            "engine.resources.cpu sets both the request and the limit",
        ),
        (
            {
                "engine": {
                    "env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
                }
            },
            "spec.engine.env[0]",
            "an env entry takes value or valueFrom, not both",
        ),
        (
            {"gateway": {"envFrom": [{"prefix": "X_"}]}},
            "spec.gateway.envFrom[0]",
            "an envFrom entry takes exactly one of configMapRef or secretRef",
        ),
        (
            {"engine": {"podLabels": {"app.kubernetes.io/instance": "other"}}},
            "spec.engine.podLabels",
            "podLabels cannot set the operator's own labels",
        ),
        (
            {"engine": {"priorityClassName": "High_Priority"}},
            "spec.engine.priorityClassName",
            "String should match pattern",
        ),
        (
            {"engine": {"podDisruptionBudget": {"maxUnavailable": 0}}},
            "spec.engine.podDisruptionBudget.maxUnavailable",
            "podDisruptionBudget.maxUnavailable 0 blocks every eviction",
        ),
        (
            {"gateway": {"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}},
            "spec.gateway.tolerations[0]",
            "a toleration with operator Exists takes no value",
        ),
    ],
    ids=[
        "affinity-in-without-values",
        "affinity-without-topology-key",
        "request-over-limit",
        "bad-quantity",
        "bad-resource-name",
        "bad-gpu-resource-name",
        "gpu-resource-in-kubernetes-io",
        "cpu-twice",
        "env-value-and-value-from",
        "env-from-without-source",
        "reserved-pod-label",
        "bad-priority-class-name",
        "max-unavailable-zero",
        "toleration-exists-with-value",
    ],
)
def test_a_bad_pod_field_is_refused_naming_it(
    installed_chart: ControlPlane, spec: dict[str, Any], field: str, words: str
) -> None:
    """The apiserver names the field; ``shoal up`` (the same models) refuses the same spec."""
    from pydantic import ValidationError

    from shoal.operator.spec import InferenceDeploymentSpec

    with pytest.raises(ValidationError, match=words):
        InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **spec})
    body = example("bad-pod-field", **spec)
    if "engine" in spec:
        body["spec"]["engine"] = {**example("x")["spec"]["engine"], **spec["engine"]}
    result = apply(installed_chart, "default", body)
    assert result.returncode != 0
    assert f"{field}: " in result.stderr, result.stderr
    if not words[0].isupper():  # a CEL rule's message, in the same words as the model's
        assert words in result.stderr, result.stderr
