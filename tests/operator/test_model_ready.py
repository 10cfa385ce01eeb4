"""An hf:// source on the test-bed cluster: the objects the operator writes (fetch init containers, the cache and
tokenizer volumes, the Secret on the fetchers only) and the ``ModelReady`` condition it reads from engine pods.

The test-bed has no kubelet to run ``shoal fetch-model``, so the engine pods here are a named stand-in: pods made
from the operator's own engine pod template, bound to a node no kubelet (nor kwok) manages, whose status the test
writes as a kubelet would after the init container ran (its termination message is the fetcher's JSON line). The
fleet runs zero engine replicas, so those stand-ins are the only engine pods the operator sees.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from operator_harness import OperatorProcess, apply, condition, eventually, example, get
from support.kube_testbed import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

SOURCE = "hf://shoal-test/tiny-llama@main"
STAND_IN_NODE = "stand-in-no-kubelet"


@pytest.fixture(scope="module")
def stand_in_node(installed_chart: ControlPlane) -> Iterator[str]:
    """A cordoned, tainted Node that nothing manages: pods bound to it keep the status the test writes."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": STAND_IN_NODE},
        "spec": {"unschedulable": True, "taints": [{"key": "shoal.dev/stand-in", "effect": "NoSchedule"}]},
    }
    installed_chart.kubectl("apply", "-f", "-", input=yaml.safe_dump(node))
    yield STAND_IN_NODE
    installed_chart.kubectl("delete", "node", STAND_IN_NODE, "--wait=false", check=False)


def fleet(name: str) -> dict[str, Any]:
    body = example(
        name, model={"source": SOURCE, "credentialsSecret": "hub-token", "cache": {"hostPath": "/var/lib/shoal/models"}}
    )
    body["spec"]["replicas"] = {"min": 0, "max": 2}
    return body


def stand_in_pod(
    plane: ControlPlane, namespace: str, deployment: dict[str, Any], name: str, init_status: dict[str, Any]
) -> None:
    """A pod from the engine Deployment's template on the stand-in node, then its status as the kubelet writes it."""
    template = deployment["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": template["metadata"]["labels"]},
        "spec": {**template["spec"], "nodeName": STAND_IN_NODE},
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
    status = {
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [
                {
                    "name": "fetch-model",
                    "image": template["spec"]["initContainers"][0]["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    **init_status,
                }
            ],
            "containerStatuses": [
                {
                    "name": "engine",
                    "image": "shoal-engine",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
            ],
        }
    }
    plane.kubectl(
        "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )


def engine_deployment(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return eventually(lambda: get(plane, namespace, "deployment", f"{name}-engine"), 30, "the engine Deployment")


def model_ready(plane: ControlPlane, namespace: str, name: str, reason: str) -> dict[str, Any]:
    return eventually(
        lambda: (c := condition(get(plane, namespace, "infd", name), "ModelReady")).get("reason") == reason and c,
        30,
        f"ModelReady {reason}",
        detail=lambda: repr((get(plane, namespace, "infd", name) or {}).get("status")),
    )


def test_the_operator_writes_fetching_pods_and_reports_the_bytes_fetched(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str, stand_in_node: str
) -> None:
    apply(installed_chart, namespace, fleet("fetched"))
    engine = engine_deployment(installed_chart, namespace, "fetched")
    pod = engine["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (container,) = pod["containers"]
    assert init["name"] == "fetch-model" and init["args"][:2] == ["fetch-model", SOURCE]
    assert init["envFrom"] == [{"secretRef": {"name": "hub-token", "optional": False}}]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "envFrom" not in container and "hub-token" not in json.dumps(container)
    cache = next(v for v in pod["volumes"] if v["name"] == "model-cache")
    assert cache["hostPath"] == {"path": "/var/lib/shoal/models", "type": "DirectoryOrCreate"}
    assert container["args"][container["args"].index("--download-dir") + 1] == "/model-cache"
    gateway = get(installed_chart, namespace, "deployment", "fetched-gateway")["spec"]["template"]["spec"]  # type: ignore[index]
    assert (
        gateway["initContainers"][0]["name"] == "fetch-tokenizer"
        and "--tokenizer-only" in gateway["initContainers"][0]["args"]
    )
    assert "model-cache" not in {v["name"] for v in gateway["volumes"]}, "the gateway never mounts the weights"
    assert "hub-token" not in json.dumps(gateway["containers"])
    assert model_ready(installed_chart, namespace, "fetched", "NoEnginePods")["status"] == "False"

    record = {
        "source": SOURCE,
        "path": "/model-cache/hf/shoal-test--tiny-llama/main",
        "bytes": 123456789,
        "cached": False,
    }
    stand_in_pod(
        installed_chart,
        namespace,
        engine,
        "fetched-engine-stand-in-a",
        {"state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": json.dumps(record)}}},
    )
    ready = model_ready(installed_chart, namespace, "fetched", "Fetched")
    assert ready["status"] == "True"
    assert (
        ready["message"]
        == f"{SOURCE}: 117.7 MiB (123456789 bytes) in 1 of 1 engine pods (1 downloaded it, 0 found it cached)"
    )


def test_a_failed_fetch_is_model_ready_false_with_the_stores_answer(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str, stand_in_node: str
) -> None:
    apply(installed_chart, namespace, fleet("denied"))
    engine = engine_deployment(installed_chart, namespace, "denied")
    error = "401 Unauthorized from https://huggingface.co/api/models/shoal-test/tiny-llama/revision/main: set HF_TOKEN"
    stand_in_pod(
        installed_chart,
        namespace,
        engine,
        "denied-engine-stand-in-a",
        {
            "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}},
            "lastState": {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "message": json.dumps({"source": SOURCE, "error": error}),
                }
            },
        },
    )
    failed = model_ready(installed_chart, namespace, "denied", "FetchFailed")
    assert (failed["status"], failed["message"]) == (
        "False",
        f"pod denied-engine-stand-in-a: fetching {SOURCE} failed: {error}",
    )
    infd = get(installed_chart, namespace, "infd", "denied")
    degraded = condition(infd, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "FetchFailed") and error in degraded["message"]
