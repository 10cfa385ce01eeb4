"""The real Prometheus Operator on the test bed, with a ``Prometheus`` object carrying kube-prometheus-stack's
default selectors (ServiceMonitors, PodMonitors and PrometheusRules labelled ``release: kube-prometheus-stack``, in
every namespace), finds everything Shoal ships: the operator's PodMonitors for a fleet's engines and gateway and
its PrometheusRule (the operator runs with ``--monitoring-label release=kube-prometheus-stack``, the chart's
``monitoring.labels``), the chart's ServiceMonitor for the operator and its fleet-wide PrometheusRule. What is
checked is what the Prometheus Operator generates from them: the scrape jobs in the config Secret
``prometheus-<name>`` (gzipped ``prometheus.yaml.gz``) with the pod selectors they keep, and every Shoal rule in the
rule ConfigMaps ``prometheus-<name>-rulefiles-*``, which ``promtool check rules`` accepts and a real Prometheus
loads and evaluates without error. An unlabelled PodMonitor beside them is left out (the selectors are real).

Not done here: scraping through the generated config. Its jobs discover targets with ``kubernetes_sd_configs``,
which Debian's Prometheus is built without, and the fleet's pods are kwok's (no kubelet, nothing listening at their
IPs). ``tests/autoscale/test_dashboard_panels.py`` is the scrape proof: a real Prometheus scraping real engines, a
real gateway and the real operator, labelled as these jobs label them.
"""

from __future__ import annotations

import gzip
import subprocess
from base64 import b64decode
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import CHART, KPS_RELEASE, RELEASE, RELEASE_NAMESPACE, OperatorProcess, apply, example, get
from support.kube_testbed import Component, ControlPlane
from support.polling import eventually
from support.prometheus_operator import PrometheusOperatorMissing, prometheus_operator_dir, start_prometheus_operator
from support.services import http_json, start_prometheus

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

FLEET = "kps"
MONITORING = "kps-monitoring"
PROMETHEUS = "kube-prometheus-stack-prometheus"  # the name kube-prometheus-stack gives its Prometheus
SELECTOR = {"matchLabels": {"release": KPS_RELEASE}}
CRD_KINDS = ("podmonitors", "prometheusrules", "servicemonitors", "prometheuses")


def prometheus_object() -> dict[str, Any]:
    """A ``Prometheus`` as kube-prometheus-stack renders it by default: selectors by release label, and an empty
    namespace selector (every namespace) for each kind."""
    spec: dict[str, Any] = {"replicas": 1, "evaluationInterval": "30s", "scrapeInterval": "30s"}
    for kind in ("serviceMonitor", "podMonitor", "rule", "probe", "scrapeConfig"):
        spec |= {f"{kind}Selector": SELECTOR, f"{kind}NamespaceSelector": {}}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": PROMETHEUS, "namespace": MONITORING},
        "spec": spec,
    }


def chart_monitoring_objects(plane: ControlPlane) -> list[dict[str, Any]]:
    """The chart's ServiceMonitor and fleet-wide PrometheusRule, rendered with ``monitoring.labels`` set as
    kube-prometheus-stack's selectors want and the Prometheus Operator's kinds served."""
    rendered = plane.helm(
        "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
        "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
        "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
        "--set", f"monitoring.labels.release={KPS_RELEASE},prometheusRule.enabled=true",
        "--show-only", "templates/servicemonitor.yaml", "--show-only", "templates/prometheusrule.yaml",
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(rendered) if d]


@pytest.fixture
def prometheus_operator(installed_chart: ControlPlane, tmp_path: Path) -> Iterator[Component]:
    """The Prometheus Operator's own CRDs (from its Go module) installed and the operator running; both removed
    after, so the reduced CRDs of test_prometheus_operator.py can come and go around it."""
    try:
        root = prometheus_operator_dir()
    except PrometheusOperatorMissing as missing:
        pytest.skip(str(missing))
    plane = installed_chart
    crds = [f"crd/{kind}.monitoring.coreos.com" for kind in CRD_KINDS]
    plane.kubectl("wait", "--for=delete", "--timeout=60s", *crds, check=False)  # a test's earlier ones, going
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(root / "crds"))
    eventually(  # kubectl wait gives up at once on a CRD its read does not see yet
        lambda: (
            plane.kubectl("wait", "--for=condition=Established", "--timeout=10s", *crds, check=False).returncode == 0
        ),
        60,
        "the Prometheus Operator's CRDs Established",
    )
    plane.kubectl("create", "namespace", MONITORING)
    component = start_prometheus_operator(plane, root, tmp_path)
    try:
        yield component
    finally:
        component.stop()
        plane.kubectl("delete", "namespace", MONITORING, "--wait=false", check=False)
        plane.kubectl("delete", "-f", str(root / "crds"), "--timeout=60s", check=False)


def generated_config(plane: ControlPlane) -> dict[str, Any] | None:
    secret = get(plane, MONITORING, "secret", f"prometheus-{PROMETHEUS}")
    if not secret or "prometheus.yaml.gz" not in secret.get("data", {}):
        return None
    return yaml.safe_load(gzip.decompress(b64decode(secret["data"]["prometheus.yaml.gz"])))


def generated_rule_files(plane: ControlPlane) -> dict[str, str]:
    """Every rule file the Prometheus Operator wrote into its rule ConfigMaps, by file name."""
    listing = plane.kubectl("get", "configmaps", "-n", MONITORING, "-o", "yaml").stdout
    maps = [
        m
        for m in yaml.safe_load(listing)["items"]
        if m["metadata"]["name"].startswith(f"prometheus-{PROMETHEUS}-rulefiles-")
    ]
    return {name: text for m in maps for name, text in (m.get("data") or {}).items()}


def jobs(config: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in (config or {}).get("scrape_configs", [])}


def keeps_pods_labelled(job: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the job keeps only pods carrying ``labels`` (the Prometheus Operator's relabelling of a
    PodMonitor's matchLabels: one ``keep`` on the label's value and presence per label)."""
    keeps = [
        (r.get("source_labels"), r.get("regex")) for r in job.get("relabel_configs", []) if r.get("action") == "keep"
    ]
    for key, value in labels.items():
        sanitized = "".join(c if c.isalnum() else "_" for c in key)
        wanted = (
            [f"__meta_kubernetes_pod_label_{sanitized}", f"__meta_kubernetes_pod_labelpresent_{sanitized}"],
            f"({value});true",
        )
        if wanted not in keeps:
            return False
    return True


def alerts_in(groups: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(alert, expression) of every alerting rule, sorted: the same alert name recurs (one rule per engine kind)."""
    return sorted((rule["alert"], rule["expr"]) for group in groups for rule in group["rules"] if "alert" in rule)


def test_kube_prometheus_stack_selectors_pick_up_what_shoal_ships(
    installed_chart: ControlPlane,
    operator: OperatorProcess,
    prometheus_operator: Component,
    namespace: str,
    tmp_path: Path,
) -> None:
    plane = installed_chart
    chart_objects = chart_monitoring_objects(plane)
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(chart_objects))
    apply(plane, namespace, example(FLEET))
    engine_monitor = eventually(lambda: get(plane, namespace, "podmonitor", f"{FLEET}-engine"), 60, "PodMonitor")
    unlabelled = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "unlabelled", "namespace": namespace},
        "spec": engine_monitor["spec"],
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(unlabelled))
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(prometheus_object()))

    (service_monitor,) = [o for o in chart_objects if o["kind"] == "ServiceMonitor"]
    expected_jobs = {
        f"podMonitor/{namespace}/{FLEET}-engine/0",
        f"podMonitor/{namespace}/{FLEET}-gateway/0",
        f"serviceMonitor/{RELEASE_NAMESPACE}/{service_monitor['metadata']['name']}/0",
    }

    def with_shoal_jobs() -> dict[str, Any] | None:
        config = generated_config(plane)
        return config if expected_jobs <= jobs(config).keys() else None

    config = eventually(
        with_shoal_jobs,
        90,
        "Shoal's scrape jobs in the generated Prometheus config",
        detail=lambda: f"jobs: {sorted(jobs(generated_config(plane)))}\n{prometheus_operator.log_tail()}",
    )
    found = jobs(config)
    assert f"podMonitor/{namespace}/unlabelled/0" not in found
    for component in ("engine", "gateway"):
        job = found[f"podMonitor/{namespace}/{FLEET}-{component}/0"]
        deployment = get(plane, namespace, "deployment", f"{FLEET}-{component}")
        assert deployment is not None
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert keeps_pods_labelled(job, selector), job["relabel_configs"]
        assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [namespace]
        assert (job["metrics_path"], job["scrape_interval"]) == ("/metrics", "15s")
    operator_job = found[f"serviceMonitor/{RELEASE_NAMESPACE}/{service_monitor['metadata']['name']}/0"]
    assert operator_job["honor_labels"] is True

    fleet_rule = get(plane, namespace, "prometheusrule", FLEET)
    (chart_rule,) = [o for o in chart_objects if o["kind"] == "PrometheusRule"]
    assert fleet_rule is not None
    fleet_alerts, chart_alerts = alerts_in(fleet_rule["spec"]["groups"]), alerts_in(chart_rule["spec"]["groups"])
    assert fleet_alerts and chart_alerts
    shipped = sorted(fleet_alerts + chart_alerts)

    def rules_generated() -> dict[str, str] | None:
        files = generated_rule_files(plane)
        groups = [g for text in files.values() for g in yaml.safe_load(text)["groups"]]
        return files if alerts_in(groups) == shipped else None

    files = eventually(
        rules_generated,
        60,
        "every Shoal rule in the rule ConfigMaps",
        detail=lambda: str(sorted(generated_rule_files(plane))),
    )

    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    checked = subprocess.run(["promtool", "check", "rules", *paths], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    config_for_rules = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": paths}
    prometheus = start_prometheus(tmp_path / "prometheus", config_for_rules)
    try:

        def evaluated() -> list[dict[str, Any]]:
            groups = http_json(prometheus.url + "/api/v1/rules")["data"]["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            return rules if rules and all(not r["lastEvaluation"].startswith("0001") for r in rules) else []

        loaded = eventually(evaluated, 60, "the rules loaded and evaluated")
        assert sorted(r["name"] for r in loaded if r["type"] == "alerting") == [name for name, _ in shipped]
        assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []
    finally:
        prometheus.stop()
