"""Fixtures for the operator against the real control plane: the Helm chart installed, and the operator run
as a real ``shoal operator`` process with the chart's ServiceAccount token (so the chart's RBAC is what is
tested). The pure tests in this folder use none of these."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `operator_harness` under any pytest import mode

from operator_harness import KPS_RELEASE, OperatorProcess
from support.kube_testbed import ControlPlane


@pytest.fixture(scope="session")
def operator(
    installed_chart: ControlPlane,
    kube_cluster: ControlPlane,
    operator_kubeconfig: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        installed_chart,
        operator_kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        "--priority",
        "100",
        "--monitoring-label",
        f"release={KPS_RELEASE}",  # what kube-prometheus-stack's default selectors want (test_prometheus_operator)
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture
def namespace(installed_chart: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "op-" + request.node.name.replace("_", "-").lower()[:40].strip("-")
    installed_chart.kubectl("create", "namespace", name)
    yield name
    installed_chart.kubectl("delete", "namespace", name, "--wait=false", check=False)
