"""Who may reach the engines: a NetworkPolicy admitting the fleet's own gateway pods and, for ``/metrics``, the
Prometheus pods (by label, in any namespace) and, when its autoscaler scrapes the engines directly
(``autoscaling.metrics.source: scrape``) or it loads adapters at run time (kind shoal), the operator's pods, to
the engine port, and nothing else; the gateway
also to the KV-event and replay ports of a kind that publishes its KV cache (vLLM). Clients go
through the gateway, whose API keys and quotas the engines' unauthenticated API would otherwise bypass. Enforced
by any CNI that implements NetworkPolicy (Calico, Cilium, kind's kindnet); ignored by one that does not."""

from __future__ import annotations

from typing import Any

from shoal.engine_kinds.vllm import KV_EVENTS_PORT
from shoal.operator.builders.adapters import at_run_time
from shoal.operator.builders.engine import publishes_zmq_events
from shoal.operator.naming import COMPONENT_LABEL, ENGINE_PORT, Owner
from shoal.operator.spec import InferenceDeploymentSpec

COMPONENT = "engine"


# the operator's pods (the chart's selector labels), in whichever namespace it is installed
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "shoal", COMPONENT_LABEL: "operator"}


def engine_network_policy(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, Any]:
    port = [{"protocol": "TCP", "port": ENGINE_PORT}]
    scrapers = {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": dict(spec.network_policy.prometheus_pod_labels)},
    }
    events = [{"protocol": "TCP", "port": KV_EVENTS_PORT + offset} for offset in (0, 1)]  # publisher, replay
    gateway_ports = port + (events if publishes_zmq_events(spec) else [])
    ingress = [
        {"from": [{"podSelector": {"matchLabels": owner.selector("gateway")}}], "ports": gateway_ports},
        {"from": [scrapers], "ports": port},
    ]
    scrapes = spec.autoscaling.enabled and spec.autoscaling.metrics.source == "scrape"  # the autoscaler's /metrics
    if scrapes or at_run_time(spec):  # or the operator loads adapters through the engines' endpoints
        ingress.append(
            {"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": OPERATOR_POD_LABELS}}], "ports": port}
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": owner.metadata(owner.engine_name, COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": owner.selector(COMPONENT)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
