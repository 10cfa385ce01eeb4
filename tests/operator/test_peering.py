"""HA: two operator replicas share a kopf peering object; only the higher-priority one acts, and the other
takes over when it leaves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from operator_harness import OperatorProcess, apply, eventually, example, get, wait_ready
from support.kube_testbed import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


@pytest.fixture
def standby(
    installed_chart: ControlPlane, operator: OperatorProcess, operator_kubeconfig: Path, tmp_path: Path
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(installed_chart, operator_kubeconfig, tmp_path / "standby.log", "--priority", "50")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()
        if operator.process.poll() is not None:
            operator.restart()


def test_only_the_leader_acts_and_the_standby_takes_over(
    installed_chart: ControlPlane, operator: OperatorProcess, standby: OperatorProcess, namespace: str
) -> None:
    def priorities() -> list[int]:
        peering = get(installed_chart, "default", "clusterkopfpeering", "shoal") or {}
        return sorted(peer["priority"] for peer in (peering.get("status") or {}).values())

    eventually(lambda: priorities() == [50, 100], 30, "both replicas registered in the peering object")
    apply(installed_chart, namespace, example("led"))
    wait_ready(installed_chart, namespace, "led")
    assert "Handler 'reconcile' succeeded" in operator.log()
    assert "Handler 'reconcile' succeeded" not in standby.log(), "the lower-priority replica must not act"

    operator.stop()
    eventually(lambda: "Resuming operations after the pause" in standby.log(), 30, "the standby takes over")
    assert priorities() == [50], "the leaving replica removed itself from the peering object"
    apply(installed_chart, namespace, example("failover"))
    wait_ready(installed_chart, namespace, "failover")
    assert "Handler 'reconcile' succeeded" in standby.log()
    assert get(installed_chart, namespace, "deployment", "failover-engine") is not None
