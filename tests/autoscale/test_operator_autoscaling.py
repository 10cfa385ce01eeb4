"""The autoscaler inside the operator, on the test-bed apiserver with the chart's RBAC: the real ShoalPolicy's
decisions become the engine Deployment's replicas, the status (printer columns, last decision, bounded history)
and Events; scale-down waits for its window; it is the only writer of the count; Recommend mode acts on
nothing; missing metrics hold the count and say so.

The metrics here are a scripted source (``ScriptedSource``, a fake named as such: the engine pods are kwok
fakes that serve nothing), so each test states exactly what the policy sees. The same loop against a real
Prometheus scraping real engines is ``test_operator_prometheus.py``. The operator runs in-process (kopf's
KopfRunner) with a higher peering priority than any session operator, which pauses meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kopf.testing import KopfRunner
from operator_harness import apply, condition, example, get
from support.kube_testbed import ControlPlane
from support.polling import eventually

from shoal.autoscale import FleetSignals, ReplicaSignals
from shoal.operator.autoscaler import FleetAutoscaler, FleetRef
from shoal.operator.handlers import OperatorConfig, build_registry

pytestmark = [pytest.mark.kube, pytest.mark.timeout(240)]


class ScriptedSource:
    """A fake metrics source: every replica the operator asked for is ready, and a backlog of ``waiting``
    requests is spread evenly over them."""

    def __init__(self, waiting: float = 0.0, ttft: float | None = 0.2, missing: str | None = None) -> None:
        self.waiting, self.ttft, self.missing = waiting, ttft, missing
        self.calls = 0

    async def observe(self, fleet: FleetRef, desired: int, now: float) -> FleetSignals:
        self.calls += 1
        if self.missing:
            return FleetSignals(time=now, desired=desired, missing=self.missing)
        share = self.waiting / max(desired, 1)
        replicas = tuple(
            ReplicaSignals(
                f"{fleet.name}-{i}",
                "ready",
                since=now - 600,
                waiting=share,
                running=1.0 if share else 0.0,
                kv_usage=0.1,
            )
            for i in range(desired)
        )
        return FleetSignals(time=now, desired=desired, replicas=replicas, ttft_p95_seconds=self.ttft)

    def forget(self, key: tuple[str, str]) -> None:
        pass


@contextmanager
def operator(kubeconfig: Path, source: ScriptedSource, monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetAutoscaler]:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    autoscaler = FleetAutoscaler(source)
    registry = build_registry(OperatorConfig(resync_seconds=1.0, autoscaler=autoscaler))
    with KopfRunner(["run", "--all-namespaces", "--peering", "shoal", "--priority", "300"], registry=registry):
        yield autoscaler


def fleet(name: str, **autoscaling: Any) -> dict[str, Any]:
    body = example(name, autoscaling={"enabled": True, "queueDepthPerReplica": 4, "maxStep": 2, **autoscaling})
    body["spec"]["replicas"] = {"min": 1, "max": 4, "count": 1}
    return body


def engines(plane: ControlPlane, namespace: str, name: str) -> int | None:
    return (get(plane, namespace, "deployment", f"{name}-engine") or {}).get("spec", {}).get("replicas")


def events(plane: ControlPlane, namespace: str, reason: str) -> list[str]:
    listing = plane.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"reason={reason}",
        "-o",
        'jsonpath={range .items[*]}{.type}: {.message}{"\\n"}{end}',
    ).stdout
    return [line for line in listing.splitlines() if line]


def test_a_queue_scales_up_at_once_and_down_only_after_the_window(
    installed_chart: ControlPlane, operator_kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane, source = installed_chart, ScriptedSource(waiting=0.0, ttft=0.1)
    with operator(operator_kubeconfig, source, monkeypatch):
        apply(plane, namespace, fleet("burst", scaleDownStabilizationSeconds=8))
        eventually(
            lambda: ((get(plane, namespace, "infd", "burst") or {}).get("status") or {}).get("lastDecision"),
            60,
            "a first evaluation at 1 engine",
        )
        source.waiting, source.ttft = 12.0, 0.9  # a burst
        eventually(lambda: engines(plane, namespace, "burst") == 3, 60, "1 -> 3 engines (12 waiting vs 4, maxStep 2)")
        infd = eventually(
            lambda: (i := get(plane, namespace, "infd", "burst")) and i["status"].get("queueDepth") == 12.0 and i,
            30,
            "the backlog observed over 3 engines",
        )
        status = infd["status"]
        assert status["desiredReplicas"] == 3 and status["ttftP95Seconds"] == 0.9
        assert status["lastDecision"]["applied"] is True
        record = status["history"][-1]
        assert (record["fromReplicas"], record["toReplicas"], record["rule"]) == (1, 3, "ScaleUpQueue")
        assert record["values"]["queue_per_ready"] == 12.0 and record["applied"] is True
        assert condition(infd, "MetricsAvailable")["status"] == "True"
        row = plane.kubectl("get", "infd", "burst", "-n", namespace, "--no-headers").stdout.split()
        assert row[3:6] == ["3", "12", "0.9"], row  # Desired, Queue, TTFT-P95
        assert any("engines 1 -> 3" in line and "ScaleUpQueue" in line for line in events(plane, namespace, "Scaled"))

        source.waiting, source.ttft = 0.0, 0.1  # the load stops
        stopped = time.monotonic()
        eventually(lambda: (engines(plane, namespace, "burst") or 9) < 3, 60, "a scale-down after the window")
        assert time.monotonic() - stopped >= 6, "scale-down came before its 8 s window (1 s resync slack)"
        record = get(plane, namespace, "infd", "burst")["status"]["history"][-1]
        assert record["fromReplicas"] == 3 and record["toReplicas"] < 3 and record["rule"].startswith("ScaleDown")


def test_the_autoscaler_is_the_only_writer_of_the_count(
    installed_chart: ControlPlane, operator_kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane, source = installed_chart, ScriptedSource(waiting=8.0)  # 2 engines at the target of 4 each
    with operator(operator_kubeconfig, source, monkeypatch):
        apply(plane, namespace, fleet("owned"))
        eventually(lambda: engines(plane, namespace, "owned") == 2, 60, "the autoscaler's 2 engines")

        plane.kubectl("scale", "deployment", "owned-engine", "-n", namespace, "--replicas=4")  # a person, or an HPA
        eventually(lambda: events(plane, namespace, "ReplicasOverridden"), 30, "a Warning naming the writer")
        eventually(lambda: engines(plane, namespace, "owned") == 2, 30, "the Deployment put back to 2")
        warning = events(plane, namespace, "ReplicasOverridden")[0]
        assert warning.startswith("Warning:") and "set to 4 by kubectl" in warning and "put back to 2" in warning

        plane.kubectl("scale", "infd", "owned", "-n", namespace, "--replicas=3")  # the scale subresource
        eventually(lambda: events(plane, namespace, "ScaleIgnored"), 30, "a Warning that kubectl scale is ignored")
        assert "stays 2" in events(plane, namespace, "ScaleIgnored")[0]
        time.sleep(2)  # two more passes
        assert engines(plane, namespace, "owned") == 2


def test_recommend_mode_records_decisions_and_scales_nothing(
    installed_chart: ControlPlane, operator_kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane, source = installed_chart, ScriptedSource(waiting=12.0)
    with operator(operator_kubeconfig, source, monkeypatch) as autoscaler:
        apply(plane, namespace, fleet("advice", mode="Recommend"))
        infd = eventually(
            lambda: (
                (i := get(plane, namespace, "infd", "advice"))
                and ((i.get("status") or {}).get("lastDecision") or {}).get("rule") == "ScaleUpQueue"
                and i
            ),
            60,
            "a recorded scale-up decision (a first pass may hold while the pod starts)",
        )
        last = infd["status"]["lastDecision"]
        assert (last["replicas"], last["applied"]) == (3, False)
        record = infd["status"]["history"][-1]
        assert (record["fromReplicas"], record["toReplicas"], record["applied"]) == (1, 3, False)
        assert any("recommended" in line for line in events(plane, namespace, "ScaleRecommended"))
        assert events(plane, namespace, "Scaled") == []
        time.sleep(2)
        assert engines(plane, namespace, "advice") == 1 and infd["status"]["desiredReplicas"] == 1

        plane.kubectl("delete", "infd", "advice", "-n", namespace)
        eventually(lambda: (namespace, "advice") not in autoscaler._fleets, 30, "the deleted fleet's policy dropped")


def test_missing_metrics_hold_the_count_and_say_why(
    installed_chart: ControlPlane, operator_kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane, source = installed_chart, ScriptedSource(waiting=12.0)
    with operator(operator_kubeconfig, source, monkeypatch):
        apply(plane, namespace, fleet("blind", scaleDownStabilizationSeconds=0))
        eventually(lambda: engines(plane, namespace, "blind") == 3, 60, "scaled up while metrics flow")
        source.missing = "Prometheus http://127.0.0.1:1 unreachable"
        infd = eventually(
            lambda: (
                (i := get(plane, namespace, "infd", "blind"))
                and condition(i, "MetricsAvailable").get("status") == "False"
                and i
            ),
            30,
            "MetricsAvailable=False",
        )
        assert "unreachable" in condition(infd, "MetricsAvailable")["message"]
        assert "queueDepth" not in infd["status"], "no made-up queue depth without data"
        calls = source.calls
        eventually(lambda: source.calls >= calls + 3, 30, "more passes without data")
        assert engines(plane, namespace, "blind") == 3, "never scaled down on missing data"
