"""The engines' NetworkPolicy admits the operator's pods exactly when its autoscaler scrapes them directly
(`metrics.source: scrape`); with Prometheus as the source, or autoscaling off, it does not."""

from __future__ import annotations

from typing import Any

from shoal.operator.builders.network import engine_network_policy
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "uid")
OPERATOR_POD = {
    "app.kubernetes.io/name": "shoal",
    "app.kubernetes.io/instance": "shoal",
    "app.kubernetes.io/component": "operator",
}  # the chart's selector labels on the operator's pods


def admits_operator(**autoscaling: Any) -> bool:
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, "autoscaling": autoscaling})
    rules = engine_network_policy(OWNER, spec)["spec"]["ingress"]
    return any(
        peer.get("podSelector", {}).get("matchLabels", {}).items() <= OPERATOR_POD.items()
        and peer.get("namespaceSelector") == {}
        for rule in rules
        for peer in rule["from"]
    )


def test_the_operator_reaches_the_engines_only_when_it_scrapes_them() -> None:
    assert admits_operator(enabled=True)  # scrape is the default source
    assert not admits_operator(enabled=True, metrics={"source": "prometheus", "prometheusUrl": "http://p:9090"})
    assert not admits_operator(enabled=False)
