"""Prometheus Operator objects, built only when its CRDs exist in the cluster (otherwise the engine pods'
``prometheus.io/*`` annotations are the whole story)."""

from __future__ import annotations

from typing import Any

from shoal.operator.alerts import alert_rules
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

COMPONENT = "engine"
MONITORING_GROUP = "monitoring.coreos.com"


def pod_monitor(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": f"{MONITORING_GROUP}/v1",
        "kind": "PodMonitor",
        "metadata": owner.metadata(owner.engine_name, COMPONENT),
        "spec": {
            "selector": {"matchLabels": owner.selector(COMPONENT)},
            "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def prometheus_rule(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, Any]:
    selector = f'namespace="{owner.namespace}",pod=~"{owner.engine_name}-.*"'
    targets = spec.autoscaling
    return {
        "apiVersion": f"{MONITORING_GROUP}/v1",
        "kind": "PrometheusRule",
        "metadata": owner.metadata(owner.name, COMPONENT),
        "spec": {
            "groups": [
                {
                    "name": f"shoal.{owner.namespace}.{owner.name}",
                    "rules": alert_rules(
                        selector,
                        targets.queue_depth_per_replica,
                        targets.ttft_p95_seconds,
                        infd=owner.name,
                        kind=spec.engine.kind,
                    ),
                }
            ]
        },
    }
