"""What fakes get wrong, checked against the real apiserver: structural schemas, CEL rules, printer columns,
subresources, optimistic concurrency and RBAC."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.kube_testbed import ControlPlane

pytestmark = pytest.mark.kube

GROUP, VERSION, PLURAL = "testbed.shoal.dev", "v1", "widgets"
CEL_MESSAGE = "replicas must not exceed maxReplicas"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.readyReplicas"},
                },
                "additionalPrinterColumns": [
                    {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["model", "replicas", "maxReplicas"],
                                "properties": {
                                    "model": {"type": "string", "minLength": 1},
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "maxReplicas": {"type": "integer", "minimum": 1},
                                },
                                "x-kubernetes-validations": [
                                    {"rule": "self.replicas <= self.maxReplicas", "message": CEL_MESSAGE},
                                ],
                            },
                            "status": {"type": "object", "properties": {"readyReplicas": {"type": "integer"}}},
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, replicas: int, max_replicas: int, model: str = "smollm2-135m") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"model": model, "replicas": replicas, "maxReplicas": max_replicas},
    }


@pytest.fixture(scope="module")
def crd(kube_apiserver: ControlPlane) -> Iterator[ControlPlane]:
    kube_apiserver.kubectl("apply", "-f", "-", input=yaml.safe_dump(CRD))
    kube_apiserver.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s")
    # kubectl's discovery cache may lag the new type by a moment
    deadline = time.monotonic() + 30
    while kube_apiserver.kubectl("get", PLURAL, check=False).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    yield kube_apiserver
    kube_apiserver.kubectl("delete", "crd", f"{PLURAL}.{GROUP}", "--wait=false")


def apply(plane: ControlPlane, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(obj), check=False)


def test_cel_rule_rejects_invalid_object_with_its_message(crd: ControlPlane) -> None:
    result = apply(crd, widget("too-many", replicas=5, max_replicas=2))
    assert result.returncode != 0
    assert CEL_MESSAGE in result.stderr
    assert crd.kubectl("get", PLURAL, "too-many", check=False).returncode != 0


def test_structural_schema_rejects_wrong_types_and_missing_fields(crd: ControlPlane) -> None:
    bad_type = widget("bad-type", replicas=1, max_replicas=2)
    bad_type["spec"]["replicas"] = "three"
    result = apply(crd, bad_type)
    assert result.returncode != 0 and "spec.replicas" in result.stderr

    missing = widget("missing", replicas=1, max_replicas=2)
    del missing["spec"]["model"]
    result = apply(crd, missing)
    assert result.returncode != 0 and "spec.model" in result.stderr and "Required value" in result.stderr


def test_valid_object_is_served_with_printer_columns(crd: ControlPlane) -> None:
    result = apply(crd, widget("good", replicas=1, max_replicas=3, model="tiny-llm"))
    assert result.returncode == 0, result.stderr
    table = crd.kubectl("get", PLURAL, "good").stdout.splitlines()
    assert table[0].split() == ["NAME", "MODEL", "REPLICAS", "READY", "AGE"]
    assert table[1].split()[:3] == ["good", "tiny-llm", "1"]


def test_unknown_fields_are_rejected_strictly_and_pruned_otherwise(crd: ControlPlane) -> None:
    obj = widget("pruned", replicas=1, max_replicas=1)
    obj["spec"]["notInSchema"] = True
    strict = crd.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=False)
    assert strict.returncode != 0 and 'unknown field "spec.notInSchema"' in strict.stderr
    crd.kubectl("apply", "--validate=ignore", "-f", "-", input=yaml.safe_dump(obj))
    stored = yaml.safe_load(crd.kubectl("get", PLURAL, "pruned", "-o", "yaml").stdout)
    assert "notInSchema" not in stored["spec"]


def test_status_and_scale_subresources(crd: ControlPlane) -> None:
    api = client.CustomObjectsApi(crd.api_client())
    api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("scaled", replicas=1, max_replicas=4))
    api.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "scaled",
        {"status": {"readyReplicas": 1}, "spec": {"replicas": 3}},  # spec is ignored through /status
    )
    obj = api.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "scaled")
    assert obj["status"]["readyReplicas"] == 1 and obj["spec"]["replicas"] == 1

    crd.kubectl("scale", f"{PLURAL}/scaled", "--replicas=3")
    scale = api.get_namespaced_custom_object_scale(GROUP, VERSION, "default", PLURAL, "scaled")
    assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 1
    # the CEL rule guards the scale subresource too
    result = crd.kubectl("scale", f"{PLURAL}/scaled", "--replicas=9", check=False)
    assert result.returncode != 0 and CEL_MESSAGE in result.stderr


def test_stale_resource_version_conflicts(crd: ControlPlane) -> None:
    api = client.CustomObjectsApi(crd.api_client())
    created = api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("raced", 1, 2))
    stale = dict(created, spec=dict(created["spec"], replicas=2))
    newer = dict(created, spec=dict(created["spec"], model="other"))
    api.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "raced", newer)
    with pytest.raises(ApiException) as conflict:
        api.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "raced", stale)
    assert conflict.value.status == 409


def test_rbac_for_users_and_service_accounts(kube_apiserver: ControlPlane) -> None:
    kube_apiserver.kubectl("create", "namespace", "rbac-test")
    alice = kube_apiserver.user_kubeconfig("alice", groups=["shoal:testers"])
    robot = kube_apiserver.kubeconfig_for_service_account("rbac-test", "robot")
    for creds in (alice, robot):
        denied = kube_apiserver.kubectl(
            "get", "configmaps", "-n", "rbac-test", kubeconfig=creds.kubeconfig, check=False
        )
        assert denied.returncode != 0 and "forbidden" in denied.stderr, creds.user
        assert creds.user in denied.stderr

    kube_apiserver.kubectl("create", "role", "cm-reader", "-n", "rbac-test", "--verb=get,list", "--resource=configmaps")
    kube_apiserver.kubectl(
        "create", "rolebinding", "testers", "-n", "rbac-test", "--role=cm-reader", "--group=shoal:testers"
    )
    kube_apiserver.kubectl(
        "create", "rolebinding", "robot", "-n", "rbac-test", "--role=cm-reader", "--serviceaccount=rbac-test:robot"
    )
    for creds in (alice, robot):
        core = client.CoreV1Api(kube_apiserver.api_client(creds.kubeconfig))
        assert core.list_namespaced_config_map("rbac-test").items is not None
        with pytest.raises(ApiException) as forbidden:
            core.create_namespaced_config_map("rbac-test", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x")))
        assert forbidden.value.status == 403
