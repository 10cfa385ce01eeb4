"""A restarted operator resumes every InferenceDeployment and, when nothing changed, writes nothing."""

from __future__ import annotations

import time

import pytest
from operator_harness import RESYNC_SECONDS, OperatorProcess, apply, example, wait_ready
from support.kube_testbed import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


def resource_versions(plane: ControlPlane, namespace: str) -> dict[str, str]:
    out = plane.kubectl(
        "get",
        "infd,deployments,replicasets,pods,services,configmaps,serviceaccounts,roles,rolebindings",
        "-n",
        namespace,
        "-o",
        "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{'\\n'}{end}",
    ).stdout
    return dict(line.split("=", 1) for line in out.split())


def test_restart_writes_nothing_when_nothing_changed(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(installed_chart, namespace, example("steady"))
    wait_ready(installed_chart, namespace, "steady")
    time.sleep(3 * RESYNC_SECONDS)  # let the last status refresh land
    before = resource_versions(installed_chart, namespace)
    assert "InferenceDeployment/steady" in before and "Deployment/steady-engine" in before

    operator.restart()
    deadline = time.monotonic() + 30
    while "Resuming is processed" not in operator.log() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "Resuming is processed" in operator.log(), operator.log()[-3000:]
    time.sleep(5 * RESYNC_SECONDS)  # several status refreshes after the resume

    assert resource_versions(installed_chart, namespace) == before
