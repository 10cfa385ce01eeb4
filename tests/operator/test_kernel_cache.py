"""``spec.engine.kernelCache``: compiled kernels on a node's directory or a claim that outlives the engine pod,
with ``TRITON_CACHE_DIR`` (and Shoal's ``SHOAL_CACHE``) pointing into it; unset, they stay in the scratch emptyDir."""

from __future__ import annotations

import re
from typing import Any

import pytest
from operator_harness import OperatorProcess, apply, eventually, example, get
from pydantic import ValidationError
from support.kube_testbed import ControlPlane

from shoal.operator.builders import build_children
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")
ONE_OF = "spec.engine.kernelCache takes one of hostPath or claimName"


def engine_pod(engine: dict[str, Any], source: str = "smollm2-135m") -> dict[str, Any]:
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": source}, "engine": engine})
    built = build_children(OWNER, spec, 1, prometheus_operator=False)
    deployment = next(c for c in built if (c["kind"], c["metadata"]["name"]) == ("Deployment", "chat-engine"))
    return deployment["spec"]["template"]["spec"]


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_a_node_directory_holds_triton_and_shoal_kernels_across_pod_restarts() -> None:
    pod = engine_pod({"kernelCache": {"hostPath": "/var/lib/shoal/kernels"}})
    (container,) = pod["containers"]
    volume = next(v for v in pod["volumes"] if v["name"] == "kernel-cache")
    assert volume == {
        "name": "kernel-cache",
        "hostPath": {"path": "/var/lib/shoal/kernels", "type": "DirectoryOrCreate"},
    }
    assert {"name": "kernel-cache", "mountPath": "/kernel-cache"} in container["volumeMounts"]
    assert env(container)["TRITON_CACHE_DIR"] == "/kernel-cache/triton"
    assert env(container)["SHOAL_CACHE"] == "/kernel-cache/shoal"
    assert env(container)["HOME"] == "/tmp"  # the rest of HOME stays scratch


def test_a_claim_is_mounted_read_write_and_another_kind_gets_tritons_variable_only() -> None:
    pod = engine_pod({"kind": "vllm", "kernelCache": {"claimName": "kernels"}}, source="/models/m")
    (container,) = pod["containers"]
    volume = next(v for v in pod["volumes"] if v["name"] == "kernel-cache")
    assert volume == {"name": "kernel-cache", "persistentVolumeClaim": {"claimName": "kernels"}}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "kernel-cache")
    assert "readOnly" not in mount
    assert env(container)["TRITON_CACHE_DIR"] == "/kernel-cache/triton" and "SHOAL_CACHE" not in env(container)


def test_without_it_kernels_stay_in_the_pods_scratch_directory() -> None:
    pod = engine_pod({})
    (container,) = pod["containers"]
    assert "kernel-cache" not in {v["name"] for v in pod["volumes"]}
    assert "TRITON_CACHE_DIR" not in env(container) and env(container)["HOME"] == "/tmp"


def test_the_users_env_still_wins() -> None:
    engine = {"kernelCache": {"hostPath": "/k"}, "env": [{"name": "TRITON_CACHE_DIR", "value": "/elsewhere"}]}
    (container,) = engine_pod(engine)["containers"]
    names = [e["name"] for e in container["env"]]
    assert names.count("TRITON_CACHE_DIR") == 2 and container["env"][-1]["value"] == "/elsewhere"  # later wins


@pytest.mark.parametrize(
    ("engine", "source", "message"),
    [
        ({"kernelCache": {"hostPath": "/k", "claimName": "c"}}, "smollm2-135m", ONE_OF),
        ({"kernelCache": {}}, "smollm2-135m", ONE_OF),
        (
            {"kind": "llamacpp", "kernelCache": {"hostPath": "/k"}},
            "/m.gguf",
            "engine.kind llamacpp cannot honour spec.engine.kernelCache",
        ),
    ],
    ids=["both", "neither", "llamacpp"],
)
def test_the_models_refuse_a_bad_kernel_cache(engine: dict[str, Any], source: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        InferenceDeploymentSpec.model_validate({"model": {"source": source}, "engine": engine})


@pytest.mark.kube
@pytest.mark.parametrize(
    ("kernel_cache", "message"),
    [
        ({"hostPath": "/k", "claimName": "c"}, ONE_OF),
        ({}, ONE_OF),
        ({"hostPath": "relative"}, "spec.engine.kernelCache.hostPath in body should match '^/'"),
    ],
    ids=["both", "neither", "relative"],
)
def test_the_apiserver_refuses_a_bad_kernel_cache(
    installed_chart: ControlPlane, kernel_cache: dict[str, Any], message: str
) -> None:
    body = example("kernels", engine={**example("x")["spec"]["engine"], "kernelCache": kernel_cache})
    result = apply(installed_chart, "default", body)
    assert result.returncode != 0 and message in result.stderr, result.stderr


@pytest.mark.kube
@pytest.mark.timeout(180)
def test_the_operator_mounts_the_kernel_cache_into_the_engine_pods(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    """On the test bed: the Deployment with the volume passes the apiserver's validation and its pods carry it."""
    plane = installed_chart
    engine = {**example("x")["spec"]["engine"], "kernelCache": {"hostPath": "/var/lib/shoal/kernels"}}
    result = apply(plane, namespace, example("warm", engine=engine))
    assert result.returncode == 0, result.stderr

    def pod() -> dict[str, Any] | None:
        pods = get(plane, namespace, "pods", "-l", "app.kubernetes.io/instance=warm,app.kubernetes.io/component=engine")
        return (pods or {}).get("items", [None])[0] if (pods or {}).get("items") else None

    running = eventually(pod, 60, "an engine pod")
    volumes = {v["name"]: v for v in running["spec"]["volumes"]}
    assert volumes["kernel-cache"]["hostPath"] == {"path": "/var/lib/shoal/kernels", "type": "DirectoryOrCreate"}
    (container,) = running["spec"]["containers"]
    assert env(container)["TRITON_CACHE_DIR"] == "/kernel-cache/triton"
