"""Specs the apiserver accepts but that cannot work: a Degraded condition naming exactly what is wrong, an
Event, no crash loop, and recovery once the spec is fixed."""

from __future__ import annotations

import pytest
from operator_harness import OperatorProcess, apply, condition, eventually, example, get, wait_ready
from support.kube_testbed import ControlPlane

from shoal.operator.spec import DEFAULT_GPU_RESOURCE as GPU

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


def warning_events(plane: ControlPlane, namespace: str, reason: str) -> list[str]:
    out = plane.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"type=Warning,reason={reason}",
        "-o",
        "jsonpath={range .items[*]}{.message}{'\\n'}{end}",
    ).stdout
    return out.splitlines()


def test_unknown_model_alias(installed_chart: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    body = example("typo")
    body["spec"]["model"]["source"] = "smollm3-135m"
    apply(installed_chart, namespace, body)
    expected = (
        "spec.model.source 'smollm3-135m' is not a known model alias (known: smollm2-135m); "
        "give an alias, hf://ORG/REPO, s3://BUCKET/PREFIX, pvc://CLAIM/PATH or an absolute path to a "
        "Hugging Face directory or a .gguf file"
    )
    infd = eventually(
        lambda: (
            (i := get(installed_chart, namespace, "infd", "typo"))
            and condition(i, "Degraded").get("status") == "True"
            and i
        ),
        30,
        "Degraded",
    )
    assert (condition(infd, "Degraded")["reason"], condition(infd, "Degraded")["message"]) == (
        "ModelNotFound",
        expected,
    )
    assert condition(infd, "Ready")["status"] == "False"
    assert eventually(lambda: warning_events(installed_chart, namespace, "ModelNotFound"), 20) == [expected]
    assert get(installed_chart, namespace, "deployment", "typo-engine") is None, "nothing that cannot work is created"
    assert operator.process.poll() is None and "Handler 'reconcile' failed" not in operator.log()

    body["spec"]["model"]["source"] = "smollm2-135m"
    apply(installed_chart, namespace, body)
    fixed = wait_ready(installed_chart, namespace, "typo")
    assert condition(fixed, "Degraded")["reason"] == "AsExpected"
    assert warning_events(installed_chart, namespace, "ModelNotFound") == [expected], "one Event, not one per pass"


def gpu_filler(namespace: str, pods: int) -> dict:
    """A Deployment of one-GPU pods that takes every free GPU of the kwok nodes (its surplus pods stay Pending)."""
    labels = {"app": "gpu-filler"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpu-filler", "namespace": namespace},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "hold", "image": "shoal/engine:test", "resources": {"limits": {GPU: "1"}}}],
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        },
    }


def test_no_node_has_the_gpus(installed_chart: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """Every GPU taken by other pods: the engine's pod cannot be scheduled, and the status says why."""
    apply(installed_chart, namespace, gpu_filler(namespace, 17))  # the two kwok nodes have 8 each
    body = example("greedy")
    body["spec"]["engine"]["resources"] = {"gpus": 1}
    apply(installed_chart, namespace, body)
    infd = eventually(
        lambda: (
            (i := get(installed_chart, namespace, "infd", "greedy"))
            and condition(i, "Degraded").get("reason") == "InsufficientGPU"
            and i
        ),
        60,
        "InsufficientGPU",
    )
    message = condition(infd, "Degraded")["message"]
    assert message.startswith("pod greedy-engine-") and "cannot be scheduled: 0/" in message
    assert "Insufficient nvidia.com/gpu" in message
    assert eventually(lambda: warning_events(installed_chart, namespace, "InsufficientGPU"), 20)[0] == message

    installed_chart.kubectl("delete", "deployment", "gpu-filler", "-n", namespace, "--wait=false")
    fixed = wait_ready(installed_chart, namespace, "greedy")
    assert condition(fixed, "Degraded")["status"] == "False"
