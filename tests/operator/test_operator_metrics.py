"""The operator's own metrics: each pass counted by trigger and result, a deleted fleet's series removed, and
``--monitoring-label`` refusing what is no Kubernetes label. (Served and scraped for real in
``test_prometheus_operator.py`` and ``tests/autoscale/test_dashboard_panels.py``.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kopf
import pytest

from shoal.operator.cli import monitoring_labels
from shoal.operator.metrics import OperatorMetrics
from shoal.operator.reconciler import Children, Reconciler

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_docs_list_exactly_the_operators_metrics_with_their_types_and_labels() -> None:
    documented = re.findall(r"^\| `(shoal_operator_\w+)` \| (\w+) \| ([\w, ]+) \|", DOCS.read_text(), flags=re.M)
    metrics = OperatorMetrics()  # one sample of each, so that every family shows its labels
    metrics.decided("ns", "x", 1, "HoldSteady")
    metrics.reconciles.labels("change", "ok").inc()
    metrics.reconcile_duration.labels("change").observe(0.1)
    metrics.alert_webhook.labels("200").observe(0.1)
    exposed = {
        (f"{family.name}_total" if family.type == "counter" else family.name, family.type): {
            label for sample in family.samples for label in sample.labels if label != "le"
        }
        for family in metrics.registry.collect()
    }
    assert {(name, kind): set(labels.split(", ")) for name, kind, labels in documented} == exposed


def sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def reconcile(reconciler: Reconciler, spec: dict[str, Any]) -> None:
    body = {"metadata": {"name": "x", "namespace": "ns", "uid": "u", "generation": 1}, "spec": spec}
    await reconciler.reconcile(
        kopf.Body(body), kopf.Patch(), Children(None, None, []), trigger="change", announce=lambda *_, **__: None
    )


async def test_a_pass_is_counted_under_its_degraded_reason_or_as_an_error() -> None:
    reconciler = Reconciler(client=None)  # type: ignore[arg-type]  # a valid spec's pass fails on it: an error
    await reconcile(reconciler, {"model": {"source": "smollm2-135m"}, "replicas": {"count": -1}})
    with pytest.raises(AttributeError):
        await reconcile(reconciler, {"model": {"source": "smollm2-135m"}})
    metrics = reconciler.metrics
    assert sample(metrics, "shoal_operator_reconciles_total", trigger="change", result="InvalidSpec") == 1
    assert sample(metrics, "shoal_operator_reconciles_total", trigger="change", result="error") == 1
    assert sample(metrics, "shoal_operator_reconcile_duration_seconds_count", trigger="change") == 2
    # the failed pass had decided its count before it failed
    assert sample(metrics, "shoal_operator_desired_replicas", namespace="ns", infd="x") == 1


def test_a_deleted_fleet_leaves_no_series() -> None:
    metrics = OperatorMetrics()
    metrics.decided("ns", "a", 3, "ScaleUpQueue")
    metrics.decided("ns", "a", 3, "HoldSteady")
    metrics.decided("ns", "b", 1, None)  # autoscaling off: a count, no decision
    assert (
        sample(metrics, "shoal_operator_autoscaler_decisions_total", namespace="ns", infd="a", rule="HoldSteady") == 1
    )
    assert sample(metrics, "shoal_operator_autoscaler_decisions_total", namespace="ns", infd="b", rule="None") is None
    metrics.forget("ns", "a")
    page = [s for m in metrics.registry.collect() for s in m.samples]
    assert {s.labels.get("infd") for s in page if "infd" in s.labels} == {"b"}


@pytest.mark.parametrize("flag", ["release", "=x", "release=kube prometheus", "team/=a", "a=-b"])
def test_a_monitoring_label_that_is_no_label_is_refused_naming_it(flag: str) -> None:
    with pytest.raises(ValueError, match=f"--monitoring-label {re.escape(repr(flag))}: expected KEY=VALUE"):
        monitoring_labels([flag])
    assert monitoring_labels(["release=kube-prometheus-stack", "example.com/team=a"]) == {
        "release": "kube-prometheus-stack",
        "example.com/team": "a",
    }


def test_the_operator_exits_2_on_a_bad_monitoring_label() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "shoal.operator", "operator", "--monitoring-label", "release"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--monitoring-label 'release'" in result.stderr


def test_the_active_rule_is_one_series_per_fleet_that_follows_each_evaluation() -> None:
    metrics = OperatorMetrics()
    metrics.decided("ns", "a", 2, "ScaleUpTTFT")
    metrics.decided("ns", "a", 2, "HoldNoQueue")
    assert sample(metrics, "shoal_operator_autoscaler_rule", namespace="ns", infd="a", rule="HoldNoQueue") == 1
    assert sample(metrics, "shoal_operator_autoscaler_rule", namespace="ns", infd="a", rule="ScaleUpTTFT") is None
    metrics.forget("ns", "a")
    assert sample(metrics, "shoal_operator_autoscaler_rule", namespace="ns", infd="a", rule="HoldNoQueue") is None
    metrics.decided("ns", "b", 2, "HoldSteady")
    metrics.decided("ns", "b", 2, None)  # autoscaling turned off: no rule decides the count any more
    assert sample(metrics, "shoal_operator_autoscaler_rule", namespace="ns", infd="b", rule="HoldSteady") is None
