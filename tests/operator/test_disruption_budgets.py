"""PodDisruptionBudgets: one for the engines and one for the gateways, owned by the InferenceDeployment,
maxUnavailable 1 unless the spec says otherwise; a budget that would block every eviction (minAvailable at or
above the most replicas, maxUnavailable 0) is refused when the InferenceDeployment is written."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from operator_harness import OperatorProcess, apply, eventually, example, get
from pydantic import ValidationError
from support.kube_testbed import ControlPlane

from shoal.operator.builders import build_children
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")


def budgets(**overrides: Any) -> dict[str, dict[str, Any]]:
    s = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **overrides})
    built = build_children(OWNER, s, 1, prometheus_operator=False)
    return {c["metadata"]["name"]: c["spec"] for c in built if c["kind"] == "PodDisruptionBudget"}


def test_engines_and_gateways_each_get_a_budget_of_one_by_default() -> None:
    assert budgets() == {
        "chat-engine": {
            "selector": {"matchLabels": OWNER.selector("engine")},
            "maxUnavailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
        "chat-gateway": {
            "selector": {"matchLabels": OWNER.selector("gateway")},
            "maxUnavailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def test_the_spec_sets_either_bound() -> None:
    given = budgets(
        replicas={"min": 2, "max": 8},
        engine={"podDisruptionBudget": {"minAvailable": "50%"}},
        gateway={"replicas": 3, "podDisruptionBudget": {"maxUnavailable": 2}},
    )
    assert given["chat-engine"]["minAvailable"] == "50%" and "maxUnavailable" not in given["chat-engine"]
    assert given["chat-gateway"]["maxUnavailable"] == 2


BLOCKING = [
    ({"replicas": {"min": 1, "max": 4}, "engine": {"podDisruptionBudget": {"minAvailable": 4}}}, "engine"),
    ({"replicas": {"min": 1, "max": 4}, "engine": {"podDisruptionBudget": {"minAvailable": "80%"}}}, "engine"),
    ({"gateway": {"replicas": 2, "podDisruptionBudget": {"minAvailable": 2}}}, "gateway"),
    ({"gateway": {"replicas": 2, "podDisruptionBudget": {"minAvailable": "100%"}}}, "gateway"),
]
EVICTABLE = [
    {"replicas": {"min": 1, "max": 4}, "engine": {"podDisruptionBudget": {"minAvailable": 3}}},
    {"replicas": {"min": 1, "max": 4}, "engine": {"podDisruptionBudget": {"minAvailable": "75%"}}},
    {"gateway": {"replicas": 2, "podDisruptionBudget": {"minAvailable": 1}}},
    {"gateway": {"replicas": 2, "podDisruptionBudget": {"maxUnavailable": "1%"}}},
]


@pytest.mark.parametrize(("spec", "section"), BLOCKING, ids=["count", "percent", "gateway", "gateway-percent"])
def test_shoal_up_refuses_a_budget_that_blocks_every_eviction(spec: dict[str, Any], section: str) -> None:
    with pytest.raises(ValidationError, match=f"{section}.podDisruptionBudget.minAvailable must be less than"):
        InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **spec})


@pytest.mark.kube
@pytest.mark.parametrize(("spec", "section"), BLOCKING, ids=["count", "percent", "gateway", "gateway-percent"])
def test_the_apiserver_refuses_a_budget_that_blocks_every_eviction(
    installed_chart: ControlPlane, spec: dict[str, Any], section: str
) -> None:
    result = apply(installed_chart, "default", example("blocking", **spec))
    assert result.returncode != 0
    assert f"spec.{section}.podDisruptionBudget.minAvailable: Invalid value" in result.stderr, result.stderr
    assert f"{section}.podDisruptionBudget.minAvailable must be less than" in result.stderr, result.stderr


@pytest.mark.kube
def test_the_apiserver_accepts_a_budget_that_leaves_room(installed_chart: ControlPlane) -> None:
    for i, spec in enumerate(EVICTABLE):
        InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **spec})
        body = yaml.safe_dump(example(f"room-{i}", **spec))
        result = installed_chart.kubectl(
            "apply", "--dry-run=server", "-n", "default", "-f", "-", input=body, check=False
        )
        assert result.returncode == 0, (spec, result.stderr)


@pytest.mark.kube
@pytest.mark.timeout(180)
def test_budgets_are_created_owned_and_collected(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    plane = installed_chart
    body = example("pdb", engine={**example("x")["spec"]["engine"], "podDisruptionBudget": {"minAvailable": 1}})
    assert apply(plane, namespace, body).returncode == 0
    infd = eventually(lambda: get(plane, namespace, "infd", "pdb"), 30, "the InferenceDeployment")
    engine = eventually(lambda: get(plane, namespace, "pdb", "pdb-engine"), 60, "the engines' budget")
    gateway = eventually(lambda: get(plane, namespace, "pdb", "pdb-gateway"), 60, "the gateways' budget")
    assert engine["spec"]["minAvailable"] == 1 and gateway["spec"]["maxUnavailable"] == 1
    for budget in (engine, gateway):
        (ref,) = budget["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("InferenceDeployment", infd["metadata"]["uid"], True)
    # the disruption controller counts the pods the budget selects
    eventually(
        lambda: (get(plane, namespace, "pdb", "pdb-engine") or {}).get("status", {}).get("expectedPods") == 1,
        60,
        "the engines' budget to count its pod",
    )
    plane.kubectl("delete", "infd", "pdb", "-n", namespace, "--wait=false")
    eventually(lambda: get(plane, namespace, "pdb", "pdb-engine") is None, 60, "the budget collected")
