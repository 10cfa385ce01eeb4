"""Scale from zero through the gateway, against real parts: a real ``shoal gateway`` process holds a request for
a fleet at zero engines, its ``shoal_gateway_requests_held`` is scraped by a real Prometheus, the operator's
autoscaler (a real ``shoal operator`` process on the test-bed control plane) reads it and scales the engine
Deployment 0 -> 1, and once that replica is ready the held request is served.

The kubelet's part is played by the test, as in ``test_operator_prometheus.py``: the gateway and engine pods are
kwok fakes, so the gateway pod's scrape target is the local gateway (labelled with the fake pod's name), and
when the engine Deployment gets its pod, a real local ``shoal serve`` engine is put in the gateway's backends
file (what the engine Service's EndpointSlice would do for a pod turning ready). Bad input from the issue:
``min: 0`` without a gateway, and a Prometheus that is down.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from operator_harness import apply, condition, example, get
from pod_scrapes import component_pods, engine_pods, engines, pod_scrapes, start_operator
from support.kube_testbed import ControlPlane, free_port
from support.polling import eventually
from support.services import Prometheus

from shoal.local import LocalProcess, metric, shoal_command

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(420)]


def zero_fleet(name: str, gateways: int) -> dict[str, Any]:
    body = example(
        name, autoscaling={"enabled": True, "metrics": {"source": "prometheus"}, "scaleDownStabilizationSeconds": 600}
    )
    body["spec"]["replicas"] = {"min": 0, "max": 2}
    body["spec"]["gateway"] = {"replicas": gateways, "holdQueue": {"size": 8, "waitSeconds": 120}}
    return body


def test_a_request_at_zero_engines_is_held_scales_the_fleet_to_one_and_is_served(
    kube_cluster: ControlPlane,
    installed_chart: ControlPlane,
    operator_kubeconfig: Path,
    namespace: str,
    scraped_fleet: Any,
    prometheus: Prometheus,
    tmp_path: Path,
) -> None:
    plane = installed_chart
    backends = tmp_path / "backends"
    backends.write_text("")
    gateway = LocalProcess(
        shoal_command(
            "gateway",
            "--backends-file",
            str(backends),
            "--hold-queue-size",
            "8",
            "--hold-seconds",
            "120",
            "--health-interval",
            "0.5",
            "--no-kv-events",
        ),
        tmp_path / "gateway.log",
    )
    operator = start_operator(plane, operator_kubeconfig, prometheus, tmp_path / "operator.log")
    try:
        gateway.wait_ready("/health", timeout=120)
        with pod_scrapes(prometheus, scraped_fleet, plane, namespace, "cold") as scrapes:
            apply(plane, namespace, zero_fleet("cold", gateways=1))
            eventually(lambda: component_pods(plane, namespace, "cold", "gateway"), 60, "the gateway pod")
            scrapes.extra_jobs = [
                {
                    "job_name": "infd-gateways",
                    "static_configs": [
                        {
                            "targets": [gateway.url.removeprefix("http://")],
                            "labels": {
                                "namespace": namespace,
                                "pod": component_pods(plane, namespace, "cold", "gateway")[0],
                            },
                        }
                    ],
                }
            ]
            scrapes.apply()
            eventually(
                lambda: (get(plane, namespace, "infd", "cold") or {}).get("status", {}).get("lastDecision"),
                60,
                "a first decision",
            )
            assert engines(plane, namespace, "cold") == 0, "min 0 and nothing held: the fleet starts at zero"

            answers: list[str] = []
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0, timeout=180)
            request = threading.Thread(
                target=lambda: answers.append(
                    client.completions.create(model="tiny-llama", prompt="cold start", max_tokens=4).choices[0].text
                )
            )
            sent = time.monotonic()
            request.start()
            eventually(lambda: metric(gateway.url, "shoal_gateway_requests_held") == 1, 30, "the request held")
            eventually(
                lambda: engines(plane, namespace, "cold") == 1, 90, "0 -> 1 engine from the held request", interval=0.2
            )
            scaled = time.monotonic() - sent
            pod = eventually(lambda: engine_pods(plane, namespace, "cold"), 60, "the engine pod")[0]
            backends.write_text(scraped_fleet.engines[1].url + "\n")  # the pod turns ready: its endpoint appears
            request.join(120)
            assert answers and isinstance(answers[0], str), "the held request was served once a replica was ready"
            assert metric(gateway.url, "shoal_gateway_requests_held") == 0
            record = get(plane, namespace, "infd", "cold")["status"]["history"][-1]
            assert (record["fromReplicas"], record["toReplicas"], record["rule"]) == (0, 1, "ScaleFromZero"), record
            assert record["values"]["held_requests"] >= 1
            print(f"request held -> engine Deployment at 1: {scaled:.1f} s (pod {pod})")
    finally:
        operator.stop()
        gateway.stop()


def test_bad_input_keeps_the_count_and_says_why(
    kube_cluster: ControlPlane,
    installed_chart: ControlPlane,
    operator_kubeconfig: Path,
    namespace: str,
    prometheus: Prometheus,
    tmp_path: Path,
) -> None:
    """`min: 0` without a gateway keeps one engine (ScalingLimited=NoGateway); a Prometheus that is down holds
    the count and MetricsAvailable=False says so, through the real Prometheus source."""
    plane = installed_chart
    operator = start_operator(plane, operator_kubeconfig, prometheus, tmp_path / "operator.log")
    try:
        apply(plane, namespace, zero_fleet("alone", gateways=0))
        down = zero_fleet("blind", gateways=1)
        down["spec"]["replicas"] = {"min": 2, "max": 4}
        down["spec"]["autoscaling"]["metrics"]["prometheusUrl"] = f"http://127.0.0.1:{free_port()}"  # nothing there
        apply(plane, namespace, down)
        infd = eventually(
            lambda: (
                (i := get(plane, namespace, "infd", "alone"))
                and condition(i, "ScalingLimited").get("reason") == "NoGateway"
                and i
            ),
            60,
            "ScalingLimited=NoGateway",
        )
        assert "gateway.replicas is 0" in condition(infd, "ScalingLimited")["message"]
        assert engines(plane, namespace, "alone") == 1
        blind = eventually(
            lambda: (
                (i := get(plane, namespace, "infd", "blind"))
                and condition(i, "MetricsAvailable").get("status") == "False"
                and i
            ),
            60,
            "MetricsAvailable=False",
        )
        assert "unreachable" in condition(blind, "MetricsAvailable")["message"]
        assert engines(plane, namespace, "blind") == 2 and "queueDepth" not in blind["status"]
    finally:
        operator.stop()
