"""Prometheus Operator objects, built only when its CRDs exist in the cluster (otherwise the pods'
``prometheus.io/*`` annotations are the whole story): a PodMonitor for the engines and one for the gateways,
and the fleet's PrometheusRule.

``labels`` (the operator's ``--monitoring-label``, the chart's ``monitoring.labels``) go on all three, so a
Prometheus that selects its monitors and rules by label (kube-prometheus-stack's default: ``release: <its
release name>``) picks them up. They never replace the labels the operator itself sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shoal.operator.alerts import alert_rules, gateway_alert_rules
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

MONITORING_GROUP = "monitoring.coreos.com"
SCRAPE = {"port": "http", "path": "/metrics", "interval": "15s"}


def _metadata(owner: Owner, name: str, component: str, labels: Mapping[str, str]) -> dict[str, Any]:
    metadata = owner.metadata(name, component)
    metadata["labels"] = {**labels, **metadata["labels"]}
    return metadata


def pod_monitor(owner: Owner, component: str, labels: Mapping[str, str] = {}) -> dict[str, Any]:
    """Scrapes the ``component`` pods' (``engine`` or ``gateway``) ``/metrics`` on their ``http`` port."""
    return {
        "apiVersion": f"{MONITORING_GROUP}/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(owner, f"{owner.name}-{component}", component, labels),
        "spec": {"selector": {"matchLabels": owner.selector(component)}, "podMetricsEndpoints": [dict(SCRAPE)]},
    }


def prometheus_rule(owner: Owner, spec: InferenceDeploymentSpec, labels: Mapping[str, str] = {}) -> dict[str, Any]:
    """The fleet's alerts, with its own targets: its engine kind's rules and its gateway's."""
    engines = f'namespace="{owner.namespace}",pod=~"{owner.engine_name}-.*"'
    gateways = f'namespace="{owner.namespace}",pod=~"{owner.gateway_name}-.*"'
    targets = spec.autoscaling
    rules = alert_rules(
        engines, targets.queue_depth_per_replica, targets.ttft_p95_seconds, infd=owner.name, kind=spec.engine.kind
    )
    rules += gateway_alert_rules(gateways, infd=owner.name)
    return {
        "apiVersion": f"{MONITORING_GROUP}/v1",
        "kind": "PrometheusRule",
        "metadata": _metadata(owner, owner.name, "engine", labels),
        "spec": {"groups": [{"name": f"shoal.{owner.namespace}.{owner.name}", "rules": rules}]},
    }


def monitoring_objects(owner: Owner, spec: InferenceDeploymentSpec, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every Prometheus Operator object of one fleet (a gateway at zero replicas has no series: its PodMonitor
    and rules then select nothing)."""
    return [
        pod_monitor(owner, "engine", labels),
        pod_monitor(owner, "gateway", labels),
        prometheus_rule(owner, spec, labels),
    ]
