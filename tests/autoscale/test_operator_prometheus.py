"""The operator's autoscaler against real parts: a real ``shoal operator`` process (the chart's RBAC) on the
test-bed control plane, a real Prometheus scraping real ``shoal serve`` engines, the shipped alert rule
evaluated by that Prometheus and routed by a real Alertmanager to the operator's webhook.

How the engines map to the InferenceDeployment: its engine pods run on kwok's fake nodes, so no container
runs and nothing listens at their pod IPs. The engines are local ``shoal serve`` processes (the tiny model, two
sequences at a time, so a few concurrent requests make a real queue), and this test plays the kubelet's part
for Prometheus: every engine pod the Deployment has gets a scrape target, one of the local engines, labelled
``namespace`` and ``pod`` with that pod's real name (the labels a PodMonitor would give it). The operator's
Prometheus source then selects exactly those series, as it would in a cluster. Two pods share one engine when
there are more pods than engines, so what a new replica reports is real engine data, not its own load.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from operator_harness import apply, condition, example, get
from pod_scrapes import engines, load, pod_scrapes, start_operator
from support.kube_testbed import ControlPlane, free_port
from support.polling import eventually
from support.services import Prometheus, Service, route_alerts_to_shoal

from shoal.operator.builders.monitoring import prometheus_rule
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(420)]

TOKEN = "alerts-token"


def fleet_body(name: str, **autoscaling: Any) -> dict[str, Any]:
    body = example(
        name,
        autoscaling={
            "enabled": True,
            "queueDepthPerReplica": 1,
            "maxStep": 1,
            "metrics": {"source": "prometheus"},
            **autoscaling,
        },
    )
    body["spec"]["replicas"] = {"min": 1, "max": 3}
    return body


def test_a_burst_scales_up_through_prometheus_and_down_only_after_its_window(
    kube_cluster: ControlPlane,
    installed_chart: ControlPlane,
    operator_kubeconfig: Path,
    namespace: str,
    scraped_fleet: Any,
    prometheus: Prometheus,
    tmp_path: Path,
) -> None:
    plane = installed_chart
    operator = start_operator(plane, operator_kubeconfig, prometheus, tmp_path / "operator.log")
    try:
        with pod_scrapes(prometheus, scraped_fleet, plane, namespace, "burst") as scrapes:
            apply(plane, namespace, fleet_body("burst", scaleDownStabilizationSeconds=10))
            eventually(lambda: len(scrapes.sync()) == 1, 60, "the first engine pod, mapped to engine 0")
            eventually(
                lambda: condition(get(plane, namespace, "infd", "burst"), "MetricsAvailable").get("status") == "True",
                60,
                "the Prometheus source observing the fleet",
            )
            assert engines(plane, namespace, "burst") == 1

            with load(scraped_fleet, 0, requests=8):
                started = time.monotonic()
                eventually(
                    lambda: (engines(plane, namespace, "burst") or 0) >= 2,
                    90,
                    "a scale-up from the queue",
                    interval=0.1,
                    detail=lambda: repr(get(plane, namespace, "infd", "burst")["status"].get("lastDecision")),
                )
                reaction = time.monotonic() - started
                eventually(lambda: len(scrapes.sync()) >= 2, 60, "the new pod mapped to engine 1")
                infd = get(plane, namespace, "infd", "burst")
            record = next(r for r in infd["status"]["history"] if r["toReplicas"] == 2)
            assert record["rule"].startswith("ScaleUp") and record["applied"], record
            assert record["values"]["waiting"] > 0
            assert any(
                "engines 1 -> 2" in e
                for e in plane.kubectl(
                    "get",
                    "events",
                    "-n",
                    namespace,
                    "--field-selector",
                    "reason=Scaled",
                    "-o",
                    "jsonpath={.items[*].message}",
                ).stdout.split("\n")
            )
            print(f"burst start -> scale-up written: {reaction:.1f} s ({record['reason']})")

            eventually(
                lambda: (
                    (i := get(plane, namespace, "infd", "burst"))
                    and i["status"].get("queueDepth") is not None
                    and i["status"].get("ttftP95Seconds")
                    and i
                ),
                30,
                "queue depth and TTFT P95 in the status",
            )
            row = plane.kubectl("get", "infd", "burst", "-n", namespace, "--no-headers").stdout.split()
            assert row[4] != "<none>" and float(row[5]) > 0, row  # Queue and TTFT-P95 filled
            # the real engines' inter-token latency reached the status, and the drain is checked against it
            drain = eventually(
                lambda: (i := get(plane, namespace, "infd", "burst"))["status"].get("tpotP90Seconds") and i,
                30,
                "the observed time per output token in the status",
            )
            assert condition(drain, "DrainFits")["reason"] in ("WithinGrace", "GraceTooShort", "MaxModelLenUnset")

            idle_since = time.monotonic()
            scaled = engines(plane, namespace, "burst") or 0
            eventually(
                lambda: scrapes.sync() and (engines(plane, namespace, "burst") or 9) < scaled,
                150,
                "a scale-down once idle",
                detail=lambda: repr(get(plane, namespace, "infd", "burst")["status"].get("lastDecision")),
            )
            waited = time.monotonic() - idle_since
            assert waited >= 8, f"scaled down {waited:.1f} s after the load stopped, inside the 10 s window"
    finally:
        operator.stop()


def test_the_shipped_alert_rule_routed_by_alertmanager_scales_up_at_once(
    kube_cluster: ControlPlane,
    installed_chart: ControlPlane,
    operator_kubeconfig: Path,
    namespace: str,
    scraped_fleet: Any,
    prometheus: Prometheus,
    alertmanager: Service,
    tmp_path: Path,
) -> None:
    """The per-fleet PrometheusRule the operator ships, with its `for:` set to 0s (the only change), evaluated
    every second by Prometheus, routed by Alertmanager (group_wait 1s) to the operator's webhook with a bearer
    token. The operator's periodic evaluation is 2 minutes away (`--resync-seconds 120`) and the fleet's
    scale-up stabilization 10 minutes, so only the alert's immediate evaluation can scale it up in this test."""
    plane = installed_chart
    token_file, port = tmp_path / "token", free_port()
    token_file.write_text(TOKEN)
    route_alerts_to_shoal(alertmanager, f"http://127.0.0.1:{port}/alerts", token_file)
    operator = start_operator(
        plane,
        operator_kubeconfig,
        prometheus,
        tmp_path / "operator.log",
        "--alerts-port",
        str(port),
        "--alerts-token-file",
        str(token_file),
        "--resync-seconds",
        "120",
    )
    try:
        with pod_scrapes(prometheus, scraped_fleet, plane, namespace, "alerted") as scrapes:
            body = fleet_body("alerted", scaleUpStabilizationSeconds=600)
            apply(plane, namespace, body)
            infd = eventually(lambda: get(plane, namespace, "infd", "alerted"), 30, "the object")
            spec = InferenceDeploymentSpec.model_validate(body["spec"])
            rules = prometheus_rule(Owner("alerted", namespace, infd["metadata"]["uid"]), spec)["spec"]
            for rule in rules["groups"][0]["rules"]:
                rule["for"] = "0s"
            scrapes.rules = rules
            scrapes.extra = {
                "alerting": {
                    "alertmanagers": [{"static_configs": [{"targets": [alertmanager.url.removeprefix("http://")]}]}]
                }
            }
            eventually(lambda: len(scrapes.sync()) == 1, 60, "the first engine pod, mapped to engine 0")
            eventually(
                lambda: prometheus.query(f'shoal_engine_requests_waiting{{namespace="{namespace}"}}'),
                60,
                "Prometheus scraping the fleet's engine",
            )

            with load(scraped_fleet, 0, requests=8):
                started = time.monotonic()
                eventually(
                    lambda: prometheus.query(
                        'ALERTS{alertname="ShoalEngineQueueBacklog",alertstate="firing",infd="alerted"}'
                    ),
                    60,
                    "the alert firing",
                    interval=0.1,
                )
                fired = time.monotonic()
                eventually(
                    lambda: (engines(plane, namespace, "alerted") or 0) >= 2,
                    30,
                    "a scale-up from the alert",
                    interval=0.1,
                )
                scaled = time.monotonic()
            history = get(plane, namespace, "infd", "alerted")["status"]["history"]
            record = next(r for r in history if r["fromReplicas"] == 1 and r["toReplicas"] == 2)
            assert record["values"].get("alert_firing") == 1.0, record
            print(f"burst -> alert firing {fired - started:.1f} s; firing -> scale written {scaled - fired:.1f} s")
            assert "Alertmanager receiver" in operator.log()
    finally:
        operator.stop()
