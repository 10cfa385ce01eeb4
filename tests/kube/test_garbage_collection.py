"""The full control plane: Deployments get Running pods on kwok GPU nodes, the scheduler honours
`nvidia.com/gpu` capacity, and deleting an owner garbage-collects what it owns."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from support.kube_testbed import ControlPlane
from support.polling import eventually

pytestmark = pytest.mark.kube
NAMESPACE = "gc-test"


def pods(plane: ControlPlane, selector: str) -> list[dict[str, Any]]:
    out = plane.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "yaml").stdout
    return list(yaml.safe_load(out)["items"])


def gpu_deployment(name: str, replicas: int, gpus: int, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "containers": [
                        {
                            "name": "engine",
                            "image": "shoal/engine:test",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


@pytest.fixture(scope="module")
def cluster(kube_cluster: ControlPlane) -> ControlPlane:
    kube_cluster.kubectl("create", "namespace", NAMESPACE)
    return kube_cluster


def test_deployment_gets_running_pods_on_gpu_nodes_and_is_garbage_collected(cluster: ControlPlane) -> None:
    cluster.kubectl("create", "configmap", "fleet-owner", "-n", NAMESPACE)
    owner = yaml.safe_load(cluster.kubectl("get", "configmap", "fleet-owner", "-n", NAMESPACE, "-o", "yaml").stdout)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(gpu_deployment("engine", replicas=2, gpus=4, owner=owner)))

    def running() -> list[dict[str, Any]]:
        found = pods(cluster, "app=engine")
        ok = len(found) == 2 and all(p["status"].get("phase") == "Running" for p in found)
        return found if ok else []

    ready = eventually(running, what="2 Running pods")
    for pod in ready:
        assert pod["spec"]["nodeName"].startswith("gpu-node-")
        assert pod["status"]["podIP"]
    cluster.kubectl("rollout", "status", "deployment/engine", "-n", NAMESPACE, "--timeout=60s")

    cluster.kubectl("delete", "configmap", "fleet-owner", "-n", NAMESPACE)
    eventually(
        lambda: cluster.kubectl("get", "deployment", "engine", "-n", NAMESPACE, check=False).returncode != 0,
        what="the Deployment to be garbage-collected",
    )
    eventually(
        lambda: (
            not cluster.kubectl("get", "replicasets", "-n", NAMESPACE, "-l", "app=engine", "-o", "name").stdout.strip()
        ),
        what="its ReplicaSet to be collected",
    )
    eventually(lambda: not pods(cluster, "app=engine"), what="its pods to be deleted")


def test_pods_beyond_gpu_capacity_stay_pending(cluster: ControlPlane) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(gpu_deployment("too-big", replicas=1, gpus=9)))

    def unschedulable() -> list[str]:
        events = cluster.kubectl(
            "get",
            "events",
            "-n",
            NAMESPACE,
            "--field-selector",
            "reason=FailedScheduling",
            "-o",
            "jsonpath={.items[*].message}",
        ).stdout
        return [events] if "Insufficient nvidia.com/gpu" in events else []

    eventually(unschedulable, what="a FailedScheduling event for nvidia.com/gpu")
    (pod,) = pods(cluster, "app=too-big")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    cluster.kubectl("delete", "deployment", "too-big", "-n", NAMESPACE)
