"""An InferenceDeployment's life under the operator (run with the chart's RBAC) in the full control plane:
children with owner references, printer columns, conditions, spec changes, `kubectl scale`, deletion."""

from __future__ import annotations

import pytest
from operator_harness import OperatorProcess, apply, children_of, condition, eventually, example, get, wait_ready
from support.kube_testbed import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


def test_example_gets_owned_children_and_becomes_ready(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    assert apply(installed_chart, namespace, example("chat")).returncode == 0
    infd = wait_ready(installed_chart, namespace, "chat")
    for key, child in children_of(installed_chart, namespace, "chat").items():
        assert child is not None, f"{key} missing"
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "InferenceDeployment",
            "chat",
            infd["metadata"]["uid"],
            True,
        ), key
        managers = installed_chart.kubectl(
            "get", key, "-n", namespace, "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"
        ).stdout.split()
        assert managers[0] == "shoal-operator", (key, managers)
    status = infd["status"]
    assert (status["replicas"], status["readyReplicas"], status["desiredReplicas"]) == (1, 1, 1)
    assert status["observedGeneration"] == infd["metadata"]["generation"]
    assert condition(infd, "Degraded")["reason"] == "AsExpected"
    assert condition(infd, "Ready")["message"] == "1/1 engines and 1/1 gateways ready"
    pods = installed_chart.kubectl(
        "get",
        "pods",
        "-n",
        namespace,
        "-l",
        "app.kubernetes.io/component=engine",
        "-o",
        "jsonpath={.items[*].status.phase}",
    ).stdout.split()
    assert pods == ["Running"]


def test_printer_columns(installed_chart: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    apply(installed_chart, namespace, example("cols", model={"source": "smollm2-135m", "servedName": "chat"}))
    wait_ready(installed_chart, namespace, "cols")
    header, row = installed_chart.kubectl("get", "infd", "-n", namespace).stdout.splitlines()
    assert header.split() == ["NAME", "MODEL", "READY", "DESIRED", "QUEUE", "TTFT-P95-SECONDS", "AGE"]
    assert row.split()[:4] == ["cols", "chat", "1", "1"]  # the name clients use, not the source
    names = installed_chart.kubectl("get", "shoal", "-n", namespace, "-o", "name").stdout.split()
    assert names == ["inferencedeployment.shoal.dev/cols"], "the `shoal` category lists it"


def test_spec_change_updates_children(installed_chart: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    apply(installed_chart, namespace, example("edit"))
    before = wait_ready(installed_chart, namespace, "edit")
    old_hash = get(installed_chart, namespace, "deployment", "edit-gateway")["spec"]["template"]["metadata"][
        "annotations"
    ]["shoal.dev/config-hash"]
    changed = example("edit", gateway={"replicas": 1, "routingPolicy": "round-robin"})
    changed["spec"]["engine"]["maxNumSeqs"] = 8
    apply(installed_chart, namespace, changed)

    def updated() -> bool:
        engine = get(installed_chart, namespace, "deployment", "edit-engine")
        args = engine["spec"]["template"]["spec"]["containers"][0]["args"]
        config = get(installed_chart, namespace, "configmap", "edit-gateway")["data"]
        return args[args.index("--max-num-seqs") + 1] == "8" and config["SHOAL_GATEWAY_POLICY"] == "round-robin"

    eventually(updated, 30, "engine args and gateway settings updated")
    gateway = get(installed_chart, namespace, "deployment", "edit-gateway")
    assert gateway["spec"]["template"]["metadata"]["annotations"]["shoal.dev/config-hash"] != old_hash
    after = wait_ready(installed_chart, namespace, "edit")
    assert after["status"]["observedGeneration"] == before["metadata"]["generation"] + 1


def test_kubectl_scale_owns_the_count_while_autoscaling_is_off(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(installed_chart, namespace, example("scaled"))
    wait_ready(installed_chart, namespace, "scaled")
    installed_chart.kubectl("scale", "infd", "scaled", "-n", namespace, "--replicas=3")
    eventually(
        lambda: get(installed_chart, namespace, "deployment", "scaled-engine")["spec"]["replicas"] == 3,
        30,
        "engine Deployment scaled to 3",
    )

    def scaled() -> dict | None:
        infd = get(installed_chart, namespace, "infd", "scaled")
        counts = tuple(infd["status"].get(k) for k in ("replicas", "readyReplicas", "desiredReplicas"))
        return infd if counts == (3, 3, 3) and condition(infd, "Ready")["status"] == "True" else None

    infd = eventually(scaled, 60, "3 of 3 engines ready")
    last = infd["status"]["history"][-1]
    assert (last["fromReplicas"], last["toReplicas"], last["reason"]) == (1, 3, "replicas.count is 3")
    scale = installed_chart.kubectl(
        "get", "--raw", f"/apis/shoal.dev/v1alpha1/namespaces/{namespace}/inferencedeployments/scaled/scale"
    )
    assert '"replicas":3' in scale.stdout and "app.kubernetes.io/component=engine" in scale.stdout
    over = installed_chart.kubectl("scale", "infd", "scaled", "-n", namespace, "--replicas=9", check=False)
    assert over.returncode != 0 and "replicas.count must lie between replicas.min and replicas.max" in over.stderr
    events = installed_chart.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "reason=Scaled", "-o", "jsonpath={.items[*].message}"
    ).stdout
    assert "engines 1 -> 3: replicas.count is 3" in events


def test_delete_garbage_collects_every_child(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(installed_chart, namespace, example("gone"))
    wait_ready(installed_chart, namespace, "gone")
    installed_chart.kubectl("delete", "infd", "gone", "-n", namespace)
    eventually(
        lambda: all(c is None for c in children_of(installed_chart, namespace, "gone").values()),
        60,
        "every child garbage-collected",
    )
    pods = installed_chart.kubectl(
        "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/instance=gone", "-o", "name"
    ).stdout.split()
    assert eventually(
        lambda: (
            not installed_chart.kubectl(
                "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/instance=gone", "-o", "name"
            ).stdout.split()
        ),
        60,
        f"pods gone (were {pods})",
    )
