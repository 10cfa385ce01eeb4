"""With the Prometheus Operator's CRDs in the cluster, each InferenceDeployment gets a PodMonitor for its
engines and one for its gateways, and a PrometheusRule, labelled so that kube-prometheus-stack's default
selectors (``release: kube-prometheus-stack``) pick them up (the operator runs with ``--monitoring-label``, as
the chart's ``monitoring.labels`` sets it); without them, only the scrape annotations (checked by the
lifecycle tests). The operator counts its passes on its own ``/metrics``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import yaml
from operator_harness import KPS_RELEASE, OperatorProcess, apply, eventually, example, get, wait_ready
from support.kube_testbed import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]


def crd(kind: str, plural: str) -> dict:
    """The Prometheus Operator's CRD, reduced to what the apiserver needs to serve the kind."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


@pytest.fixture
def install_prometheus_operator_crds(installed_chart: ControlPlane) -> Iterator[Callable[[], None]]:
    def install() -> None:
        manifests = [crd("PodMonitor", "podmonitors"), crd("PrometheusRule", "prometheusrules")]
        installed_chart.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
        installed_chart.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/podmonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
        )

    yield install
    installed_chart.kubectl(
        "delete",
        "crd",
        "podmonitors.monitoring.coreos.com",
        "prometheusrules.monitoring.coreos.com",
        "--ignore-not-found",
        "--wait=false",
    )


def test_pod_monitor_and_rules_once_the_crds_exist(
    installed_chart: ControlPlane,
    operator: OperatorProcess,
    namespace: str,
    install_prometheus_operator_crds: Callable[[], None],
) -> None:
    apply(installed_chart, namespace, example("early"))
    wait_ready(installed_chart, namespace, "early")
    install_prometheus_operator_crds()
    apply(installed_chart, namespace, example("watched"))
    for name in ("watched", "early"):  # created after, and before, the Prometheus Operator arrived
        monitor = eventually(
            lambda name=name: get(installed_chart, namespace, "podmonitor", f"{name}-engine"),
            30,
            f"PodMonitor of {name}",
        )
        rule = eventually(
            lambda name=name: get(installed_chart, namespace, "prometheusrule", name), 30, f"PrometheusRule of {name}"
        )
        gateway_monitor = eventually(
            lambda name=name: get(installed_chart, namespace, "podmonitor", f"{name}-gateway"),
            30,
            f"gateway PodMonitor of {name}",
        )
        uid = get(installed_chart, namespace, "infd", name)["metadata"]["uid"]
        for component, pods in (("engine", monitor), ("gateway", gateway_monitor)):
            deployment = get(installed_chart, namespace, "deployment", f"{name}-{component}")
            assert pods["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
            assert pods["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
        alerts = {r["alert"] for r in rule["spec"]["groups"][0]["rules"]}
        assert alerts == {
            "ShoalEngineQueueBacklog",
            "ShoalEngineTTFTHigh",
            "ShoalEngineKVCacheFull",
            "ShoalGatewayHigh5xxRate",
            "ShoalGatewayNoHealthyBackend",
        }
        for child in (monitor, gateway_monitor, rule):
            assert child["metadata"]["ownerReferences"][0]["uid"] == uid
    # what the Prometheus Operator lists with kube-prometheus-stack's default selectors, selected by the apiserver
    selected = installed_chart.kubectl(
        "get", "podmonitors,prometheusrules", "-n", namespace, "-l", f"release={KPS_RELEASE}", "-o", "name"
    ).stdout.split()
    assert sorted(selected) == sorted(
        f"{kind}.monitoring.coreos.com/{name}"
        for fleet in ("watched", "early")
        for kind, name in (
            ("podmonitor", f"{fleet}-engine"),
            ("podmonitor", f"{fleet}-gateway"),
            ("prometheusrule", fleet),
        )
    )
    page = operator.metrics()
    assert 'shoal_operator_reconciles_total{result="ok",trigger="change"}' in page
    assert f'shoal_operator_desired_replicas{{infd="early",namespace="{namespace}"}} 1.0' in page
