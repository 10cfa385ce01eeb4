"""The chart's Grafana dashboard against real parts: every panel's every query, with the fleet selector set to one
InferenceDeployment, returns series from a real Prometheus that scrapes real ``shoal serve`` engines, a real
``shoal gateway`` in front of them and the real operator (its own metrics, with the autoscaler deciding for the
fleet). No empty panel, and the two template variables list the fleet. The same Prometheus loads the shipped
alert rules (the chart's and the fleet's own PrometheusRule) and evaluates every one of them without error over
those series.

The kubelet's part is played as in ``test_scale_from_zero.py``: the fleet's pods are kwok fakes, so each scrape
target is a local process labelled with a fake pod's real name (the labels a PodMonitor gives it: ``namespace``,
``pod``); the operator's target is labelled as its ServiceMonitor would (``honor_labels``, so the per-fleet
series keep the fleet's ``namespace``). The world the panels need is made the way it happens: a request held
while the fleet has no ready engine (scale from zero), routed load through the gateway, a tenant over its quota
(429), a request over its model's quota (429: the tenants file's ``models``), an Alertmanager notification to the
operator's webhook. Rendering the dashboard in Grafana is not done here: Grafana cannot be installed in the test
environment (``docs/metrics.md`` says why).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from operator_harness import RELEASE_NAMESPACE, apply, example
from pod_scrapes import component_pods, engine_pods, pod_scrapes, start_operator
from scraped_fleet import Resending, ScrapedFleet
from support.kube_testbed import ControlPlane, free_port
from support.polling import eventually
from support.services import Prometheus, http_json

from shoal.local import LocalProcess, metric, shoal_command
from shoal.operator.builders.monitoring import prometheus_rule
from shoal.operator.dashboard import FLEET_FROM_POD, dashboard
from shoal.operator.generated import render_chart_alerts
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(420)]

FLEET = "dash"
TOKEN = "dashboard-alerts-token"
KEYS = {"team": "sk-dash-team", "tight": "sk-dash-tight"}
MODEL_TOKENS_PER_MINUTE = 1_000_000  # the served model's quota (the tenants file's `models`)
RATE_WINDOW = "30s"  # $__rate_interval: Prometheus scrapes every second here


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, rows left out."""
    return [(p["title"], t["expr"]) for p in board["panels"] if p["type"] != "row" for t in p["targets"]]


def interpolate(expr: str, namespace: str) -> str:
    """What Grafana sends with the namespace and fleet variables set to one value each."""
    return expr.replace("$namespace", namespace).replace("$fleet", FLEET).replace("$__rate_interval", RATE_WINDOW)


def variable_values(prometheus: Prometheus, variable: dict[str, Any], namespace: str) -> set[str]:
    """A ``label_values(SELECTOR, LABEL)`` variable's values, through its regex's first group (as Grafana)."""
    selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]).groups()  # type: ignore[union-attr]
    values = {series["metric"][label] for series in prometheus.query(interpolate(selector, namespace))}
    if not variable["regex"]:
        return values
    pattern = re.compile(variable["regex"].strip("/"))
    return {m.group(1) for m in map(pattern.match, values) if m}


def shipped_rules(namespace: str) -> dict[str, Any]:
    """The chart's fleet-wide rules and the fleet's own PrometheusRule, as one rules file."""
    own = prometheus_rule(Owner(FLEET, namespace, "uid"), InferenceDeploymentSpec.model_validate(fleet_body()["spec"]))
    return {"groups": [{"name": "shoal.fleet", "rules": yaml.safe_load(render_chart_alerts())}, *own["spec"]["groups"]]}


def rules_evaluated(prometheus: Prometheus) -> list[dict[str, Any]]:
    """Prometheus's loaded rules, once each has been evaluated at least once (else [])."""
    groups = http_json(prometheus.url + "/api/v1/rules")["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    return rules if rules and all(not r["lastEvaluation"].startswith("0001") for r in rules) else []


def fleet_body() -> dict[str, Any]:
    body = example(
        FLEET,
        autoscaling={"enabled": True, "metrics": {"source": "prometheus"}, "scaleDownStabilizationSeconds": 600},
    )
    body["spec"]["replicas"] = {"min": 1, "max": 2}
    return body


def post_alert(url: str, namespace: str) -> int:
    """One Alertmanager v4 notification (a resolved alert: acknowledged, nothing scaled) to the webhook."""
    alert = {
        "status": "resolved",
        "labels": {"alertname": "ShoalEngineQueueBacklog", "namespace": namespace, "infd": FLEET},
        "startsAt": "2026-01-01T00:00:00Z",
        "fingerprint": "dashboard",
    }
    payload = {"version": "4", "groupKey": "{}:{}", "status": "resolved", "alerts": [alert]}
    answer = httpx.post(url, json=payload, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    return answer.status_code


def test_every_dashboard_panel_has_data_for_a_fleet(
    kube_cluster: ControlPlane,
    installed_chart: ControlPlane,
    operator_kubeconfig: Path,
    namespace: str,
    scraped_fleet: ScrapedFleet,
    prometheus: Prometheus,
    tmp_path: Path,
) -> None:
    plane = installed_chart
    board = json.loads((Path(__file__).resolve().parents[2] / "charts/shoal/files/dashboard.json").read_text())
    assert board == dashboard(), "the committed dashboard is the generated one (`shoal crd --write`)"
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        json.dumps(
            {
                "tenants": {
                    "team": {"api_keys": [KEYS["team"]]},
                    "tight": {"api_keys": [KEYS["tight"]], "requests_per_minute": 1},
                },
                # so high the load never nears it: only a request asking for more output is refused by it
                "models": {"tiny-llama": {"tokens_per_minute": MODEL_TOKENS_PER_MINUTE}},
            }
        )
    )
    backends = tmp_path / "backends"
    backends.write_text("")  # no engine ready yet: the first request is held
    gateway = LocalProcess(
        shoal_command(
            "gateway",
            "--backends-file",
            str(backends),
            "--api-keys",
            str(keys),
            "--hold-queue-size",
            "8",
            "--hold-seconds",
            "120",
            "--health-interval",
            "0.5",
        ),
        tmp_path / "gateway.log",
    )
    token = tmp_path / "alerts-token"
    token.write_text(TOKEN)
    alerts_port = free_port()
    operator = start_operator(
        plane,
        operator_kubeconfig,
        prometheus,
        tmp_path / "operator.log",
        "--alerts-port",
        str(alerts_port),
        "--alerts-token-file",
        str(token),
    )
    try:
        gateway.wait_ready("/health", timeout=120)
        with pod_scrapes(prometheus, scraped_fleet, plane, namespace, FLEET) as scrapes:
            apply(plane, namespace, fleet_body())
            gateway_pod = eventually(lambda: component_pods(plane, namespace, FLEET, "gateway"), 60, "gateway pod")[0]
            eventually(lambda: len(scrapes.sync()) == 1, 60, "the engine pod, mapped to engine 0")

            def job(name: str, url: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
                target = {"targets": [url.removeprefix("http://")], "labels": labels}
                return {"job_name": name, "static_configs": [target], **extra}

            operator_pod = {"namespace": RELEASE_NAMESPACE, "pod": "shoal-operator-5d8f7c9b6-x2x9z"}
            scrapes.extra_jobs = [
                job("infd-gateways", gateway.url, {"namespace": namespace, "pod": gateway_pod}),
                job("shoal-operator", f"127.0.0.1:{operator.metrics_port}", operator_pod, honor_labels=True),
            ]
            scrapes.rules = shipped_rules(namespace)
            scrapes.apply()

            team = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEYS["team"], max_retries=0, timeout=180)
            held = threading.Thread(
                target=lambda: team.completions.create(model="tiny-llama", prompt="held", max_tokens=4)
            )
            held.start()
            eventually(lambda: metric(gateway.url, "shoal_gateway_requests_held") == 1, 30, "the request held")
            backends.write_text("".join(e.url + "\n" for e in scraped_fleet.engines))  # the engines turn ready
            held.join(120)
            assert not held.is_alive(), "the held request was served once replicas were ready"

            tight = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEYS["tight"], max_retries=0, timeout=60)
            tight.completions.create(model="tiny-llama", prompt="within quota", max_tokens=2)
            with pytest.raises(openai.RateLimitError):
                tight.completions.create(model="tiny-llama", prompt="over quota", max_tokens=2)
            with pytest.raises(openai.RateLimitError, match="Model `tiny-llama` is over its tokens_per_minute"):
                team.completions.create(model="tiny-llama", prompt="too long", max_tokens=2 * MODEL_TOKENS_PER_MINUTE)
            assert post_alert(f"http://127.0.0.1:{alerts_port}/alerts", namespace) == 200

            with Resending(scraped_fleet, 0, clients=3, max_tokens=8, via=team) as load:
                for variable in board["templating"]["list"][1:]:
                    eventually(
                        lambda v=variable: (
                            (namespace if v["name"] == "namespace" else FLEET)
                            in variable_values(prometheus, v, namespace)
                        ),
                        60,
                        f"the {variable['name']} variable listing the fleet",
                    )
                for title, expr in queries(board):
                    query = interpolate(expr, namespace)
                    eventually(
                        lambda q=query: prometheus.query(q),
                        60,
                        f"data in panel {title!r}",
                        detail=lambda q=query: q,
                    )
            assert not load.failures, load.failures[:3]
            rules = eventually(lambda: rules_evaluated(prometheus), 30, "every shipped rule evaluated")
            assert len(rules) == len([r for g in shipped_rules(namespace)["groups"] for r in g["rules"]])
            assert [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
            assert engine_pods(plane, namespace, FLEET)
    finally:
        operator.stop()
        gateway.stop()


def test_the_fleet_variable_reads_the_fleet_from_engine_and_gateway_pod_names() -> None:
    """The regex Grafana applies to the ``pod`` values: a fleet whose name has dashes and the word engine in it
    is still itself; other pods are not fleets."""
    pattern = re.compile(FLEET_FROM_POD.strip("/"))
    pods = {
        "chat-engine-5d8f7c9b6-x2x9z": "chat",
        "my-engine-fleet-gateway-7c9b6d8f5-q8w2k": "my-engine-fleet",
        "prometheus-k8s-0": None,
        "chat-engine-0": None,
    }
    for pod, fleet in pods.items():
        found = pattern.match(pod)
        assert (found.group(1) if found else None) == fleet, pod
