"""With autoscaling on, the autoscaler's hook owns the engine count: the operator applies its (clamped) decision,
shows its metrics in the status and printer columns, and ignores `kubectl scale`. The autoscaler itself is a
later issue; here the hook is a plain function, run in-process by kopf's own KopfRunner. It joins the peering
with a higher priority than the session's operator, which pauses meanwhile (a realistic hand-over)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from kopf.testing import KopfRunner

from support.kube_testbed import ControlPlane

from operator_harness import OperatorProcess, apply, condition, eventually, example, get
from shoal.operator.handlers import OperatorConfig, build_registry
from shoal.operator.replicas import ScaleDecision
from shoal.operator.spec import InferenceDeploymentSpec

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]


def test_the_autoscaler_hook_owns_the_count(
    installed_chart: ControlPlane, operator: OperatorProcess, operator_kubeconfig: Path, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, int]] = []

    def autoscaler(name: str, spec: InferenceDeploymentSpec, current: int, now: datetime) -> ScaleDecision:
        asked.append((name, current))
        return ScaleDecision(5, "queue 9.5 > 4 per replica", queue_depth=9.5, ttft_p95_seconds=0.8)

    monkeypatch.setenv("KUBECONFIG", str(operator_kubeconfig))
    registry = build_registry(OperatorConfig(resync_seconds=1.0, autoscaler=autoscaler))
    body = example("auto", autoscaling={"enabled": True})
    body["spec"]["replicas"] = {"min": 1, "max": 3, "count": 1}
    with KopfRunner(["run", "--all-namespaces", "--peering", "shoal", "--priority", "200"], registry=registry):
        apply(installed_chart, namespace, body)
        eventually(lambda: (get(installed_chart, namespace, "deployment", "auto-engine") or {}).get(
            "spec", {}).get("replicas") == 3, 60, "engines scaled to the clamped decision")
        infd = eventually(lambda: (i := get(installed_chart, namespace, "infd", "auto"))
                          and i.get("status", {}).get("queueDepth") == 9.5 and i, 30, "the autoscaler's metrics in the status")
        assert infd["status"]["desiredReplicas"] == 3 and infd["status"]["ttftP95Seconds"] == 0.8
        limited = condition(infd, "ScalingLimited")
        assert (limited["status"], limited["reason"]) == ("True", "TooManyReplicas")
        assert "clamped to 3" in limited["message"]
        row = installed_chart.kubectl("get", "infd", "auto", "-n", namespace, "--no-headers").stdout.split()
        assert row[3:6] == ["3", "9.5", "0.8"], row  # Desired, Queue, TTFT-P95

        installed_chart.kubectl("scale", "infd", "auto", "-n", namespace, "--replicas=2")
        eventually(lambda: get(installed_chart, namespace, "infd", "auto")["metadata"]["generation"] == 2, 10)
        eventually(lambda: get(installed_chart, namespace, "infd", "auto")["status"].get("observedGeneration") == 2,
                   30, "the scaled spec reconciled")
        assert get(installed_chart, namespace, "deployment", "auto-engine")["spec"]["replicas"] == 3, \
            "while autoscaling is on, kubectl scale does not move the engines"
    assert ("auto", 3) in asked
