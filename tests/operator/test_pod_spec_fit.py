"""The spec's pod fields (core API names: affinity, tolerations, nodeSelector, priorityClassName,
runtimeClassName, imagePullSecrets, podLabels, podAnnotations, env/valueFrom, envFrom, requests/limits,
gpuResourceName) reach the engine and gateway pods the operator writes, and the operator's own labels,
annotations and defaults hold beside them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from operator_harness import OperatorProcess, apply, eventually, example, get
from support.kube_testbed import ControlPlane

from shoal.operator.builders import build_children
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
            ]
        }
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 50,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"team": "search"}},
                },
            }
        ]
    },
}
POD_FIELDS: dict[str, Any] = {
    "affinity": AFFINITY,
    "tolerations": [{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}],
    "nodeSelector": {"pool": "inference"},
    "priorityClassName": "llm-high",
    "runtimeClassName": "shoal-test",
    "imagePullSecrets": [{"name": "registry"}],
    "podLabels": {"team": "search"},
    "podAnnotations": {"example.com/owner": "search", "prometheus.io/scrape": "false"},
    "env": [
        {"name": "PLAIN", "value": "1"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "hub"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},  # as defaulted
    ],
    "envFrom": [{"configMapRef": {"name": "tuning"}, "prefix": "TUNE_"}],
}


def spec(**overrides: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **overrides})


def pod_template(s: InferenceDeploymentSpec, name: str) -> dict[str, Any]:
    built = build_children(OWNER, s, 1, prometheus_operator=False)
    return next(c for c in built if (c["kind"], c["metadata"]["name"]) == ("Deployment", name))["spec"]["template"]


def assert_fields_reached(template: dict[str, Any], component: str) -> None:
    """Every field of POD_FIELDS, as the core API writes it, on ``template`` (the operator's own entries kept)."""
    pod, meta = template["spec"], template["metadata"]
    container = pod["containers"][0]
    assert pod["affinity"] == AFFINITY
    assert {"key": "dedicated", "value": "llm", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "inference"}
    assert (pod["priorityClassName"], pod["runtimeClassName"]) == ("llm-high", "shoal-test")
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert meta["labels"]["team"] == "search" and meta["labels"]["app.kubernetes.io/component"] == component
    assert meta["annotations"]["example.com/owner"] == "search"
    assert meta["annotations"]["prometheus.io/scrape"] == "false"  # the spec's annotation wins over the default
    assert container["env"][-3:] == POD_FIELDS["env"]
    assert {"configMapRef": {"name": "tuning"}, "prefix": "TUNE_"} in container["envFrom"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_every_pod_field_reaches_engine_and_gateway_pods() -> None:
    s = spec(engine=POD_FIELDS, gateway=POD_FIELDS)
    assert_fields_reached(pod_template(s, "chat-engine"), "engine")
    assert_fields_reached(pod_template(s, "chat-gateway"), "gateway")
    gateway = pod_template(s, "chat-gateway")["spec"]["containers"][0]
    assert gateway["envFrom"][0] == {"configMapRef": {"name": "chat-gateway"}}  # its settings first


def test_pods_run_on_linux_nodes_unless_the_spec_says_otherwise() -> None:
    assert pod_template(spec(), "chat-gateway")["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    windows = spec(engine={"nodeSelector": {"kubernetes.io/os": "windows"}})
    assert pod_template(windows, "chat-engine")["spec"]["nodeSelector"] == {"kubernetes.io/os": "windows"}


def test_requests_and_limits_are_set_apart() -> None:
    s = spec(
        engine={
            "resources": {
                "gpus": 0,
                "requests": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"},
                "limits": {"cpu": "4", "memory": "8Gi"},
            }
        }
    )
    resources = pod_template(s, "chat-engine")["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"},
        "limits": {"cpu": "4", "memory": "8Gi"},
    }
    shorthand = spec(engine={"resources": {"gpus": 0, "cpu": "2", "limits": {"memory": "8Gi"}}})
    resources = pod_template(shorthand, "chat-engine")["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "2"}, "limits": {"cpu": "2", "memory": "8Gi"}}


@pytest.mark.parametrize("gpu", ["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb"])
def test_the_gpu_resource_is_the_one_named(gpu: str) -> None:
    pod = pod_template(spec(engine={"resources": {"gpus": 1, "gpuResourceName": gpu}}), "chat-engine")["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["limits"] == {gpu: "1"} and resources["requests"] == {gpu: "1"}
    assert {"key": gpu, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_gateway_pods_are_not_best_effort() -> None:
    resources = pod_template(spec(), "chat-gateway")["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    given = spec(gateway={"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "2Gi"}}})
    resources = pod_template(given, "chat-gateway")["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "2Gi"}}


@pytest.mark.kube
@pytest.mark.timeout(180)
def test_the_operator_writes_every_pod_field_and_the_pods_run_with_them(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    """On the test bed: the pod fields pass the apiserver's own validation of the Deployments, and the pods
    (admitted with the PriorityClass and RuntimeClass they name) carry them."""
    plane = installed_chart
    objects = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "llm-high"},
            "value": 1000,
        },
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "shoal-test"}, "handler": "runc"},
    ]
    for obj in objects:
        plane.kubectl("apply", "-f", "-", input=json.dumps(obj))
    # kwok's fake nodes carry no pool label: the test keeps the nodeSelector to the OS
    fields = {**POD_FIELDS, "nodeSelector": {}}
    engine = {**example("x")["spec"]["engine"], **fields}
    body = example("fit", engine=engine, gateway={**fields, "replicas": 1})
    result = apply(plane, namespace, body)
    assert result.returncode == 0, result.stderr
    for name, component in (("fit-engine", "engine"), ("fit-gateway", "gateway")):
        deployment = eventually(lambda n=name: get(plane, namespace, "deployment", n), 60, f"Deployment {name}")
        template = deployment["spec"]["template"]
        template["spec"]["nodeSelector"]["pool"] = "inference"  # as POD_FIELDS gives it, for the shared check
        assert_fields_reached(template, component)

        def pod(c: str = component) -> dict[str, Any] | None:
            pods = get(
                plane, namespace, "pods", "-l", f"app.kubernetes.io/instance=fit,app.kubernetes.io/component={c}"
            )
            return (pods or {}).get("items", [None])[0] if (pods or {}).get("items") else None

        running = eventually(pod, 60, f"a {component} pod")
        assert running["spec"]["priority"] == 1000 and running["spec"]["runtimeClassName"] == "shoal-test"
        assert running["metadata"]["labels"]["team"] == "search"


@pytest.mark.kube
def test_kubectl_explain_describes_the_pod_fields(installed_chart: ControlPlane) -> None:
    explained = installed_chart.kubectl("explain", "infd.spec.engine.resources.gpuResourceName").stdout
    assert "amd.com/gpu" in explained and "nvidia.com/mig-1g.10gb" in explained
    explained = installed_chart.kubectl("explain", "infd.spec.gateway.affinity.podAntiAffinity").stdout
    assert "Away from which pods" in explained and "requiredDuringSchedulingIgnoredDuringExecution" in explained
