"""The Helm chart: lints and renders clean, validates its values, installs into the real apiserver."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from operator_harness import CHART, KPS_RELEASE, RELEASE, RELEASE_NAMESPACE
from support.kube_testbed import ControlPlane, kube_testbin_dir

from shoal.cli import build_parser

pytestmark = pytest.mark.kube
ALL_FEATURES = ["--set", "prometheusRule.enabled=true,grafanaDashboard.enabled=true"]
KPS_SELECTOR = {"release": KPS_RELEASE}
PROMETHEUS_OPERATOR_APIS = [
    "--api-versions",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "--api-versions",
    "monitoring.coreos.com/v1alpha1/AlertmanagerConfig",
]


def helm(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {f"HELM_{k}_HOME": str(tmp / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
    return subprocess.run(
        [str(kube_testbin_dir() / "helm"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=120,
    )


def template(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the release with every optional object on, and ``extra`` arguments."""
    return helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *ALL_FEATURES, *extra, tmp=tmp)


@pytest.mark.parametrize("values", [[], ALL_FEATURES, ["--set", "watchNamespaces={team-a,team-b}"]])
def test_lint_is_clean(values: list[str], tmp_path: Path) -> None:
    result = helm("lint", "--strict", str(CHART), *values, tmp=tmp_path)
    assert result.returncode == 0 and "0 chart(s) failed" in result.stdout, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_template_renders_every_object(tmp_path: Path) -> None:
    result = template(tmp_path, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterKopfPeering",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "PrometheusRule",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert "delete" not in rule["verbs"], "children are removed by the garbage collector, never by the operator"
    dashboard = next(d for d in docs if d["kind"] == "ConfigMap")
    assert yaml.safe_load(dashboard["data"]["shoal.json"])["uid"] == "shoal-fleets"
    alerts = next(d for d in docs if d["kind"] == "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} == {
        "ShoalEngineQueueBacklog",
        "ShoalEngineTTFTHigh",
        "ShoalEngineKVCacheFull",
        "ShoalGatewayHigh5xxRate",
        "ShoalGatewayNoHealthyBackend",
        "ShoalOperatorReconcileErrors",
    }


def _selected(selector: dict[str, str], obj: dict) -> bool:
    """A matchLabels selector's verdict on an object, as the Prometheus Operator lists them."""
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("labelled", [True, False])
def test_monitoring_labels_put_every_monitoring_object_under_kube_prometheus_stacks_selectors(
    tmp_path: Path, labelled: bool
) -> None:
    """With ``monitoring.labels.release=kube-prometheus-stack`` the chart's ServiceMonitor, PrometheusRule and
    AlertmanagerConfig match kube-prometheus-stack's default selectors, and the operator is told to label its
    PodMonitors and PrometheusRules the same; without it, none does (why the knob exists)."""
    values = ["--set", f"monitoring.labels.release={KPS_RELEASE}"] if labelled else []
    webhook = ["--set", "autoscaler.alertmanagerWebhook.enabled=true"]
    result = template(tmp_path, *webhook, *values, *PROMETHEUS_OPERATOR_APIS)
    assert result.returncode == 0, result.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.stdout) if d}
    monitoring = [d for d in docs.values() if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert sorted(d["kind"] for d in monitoring) == ["AlertmanagerConfig", "PrometheusRule", "ServiceMonitor"]
    assert all(_selected(KPS_SELECTOR, d) == labelled for d in monitoring)
    operator = docs[("Deployment", f"{RELEASE}-operator")]["spec"]["template"]["spec"]["containers"][0]
    assert (f"--monitoring-label=release={KPS_RELEASE}" in operator["args"]) == labelled
    assert "--metrics-port=8081" in operator["args"]
    assert {"name": "metrics", "containerPort": 8081} in operator["ports"]
    # the ServiceMonitor reaches the operator pods: its selector picks the metrics Service, whose port it names
    # and whose selector picks the operator pods
    monitor = docs[("ServiceMonitor", f"{RELEASE}-operator")]["spec"]
    service = docs[("Service", f"{RELEASE}-metrics")]
    assert _selected(monitor["selector"]["matchLabels"], service)
    assert monitor["namespaceSelector"] == {"matchNames": [RELEASE_NAMESPACE]}
    assert [e["port"] for e in monitor["endpoints"]] == ["metrics"] == [p["name"] for p in service["spec"]["ports"]]
    assert monitor["endpoints"][0]["honorLabels"] is True, "the fleets' namespace label survives the scrape"
    pod = docs[("Deployment", f"{RELEASE}-operator")]["spec"]["template"]
    assert _selected(service["spec"]["selector"], pod)


def test_no_service_monitor_without_the_prometheus_operator_nor_when_turned_off(tmp_path: Path) -> None:
    for extra in ([], [*PROMETHEUS_OPERATOR_APIS, "--set", "monitoring.operatorMetrics.enabled=false"]):
        result = helm("template", RELEASE, str(CHART), *extra, tmp=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "kind: ServiceMonitor" not in result.stdout
    off = helm("template", RELEASE, str(CHART), "--set", "monitoring.operatorMetrics.enabled=false", tmp=tmp_path)
    assert "--metrics-port" not in off.stdout and f"{RELEASE}-metrics" not in off.stdout


def test_values_schema_rejects_bad_values(tmp_path: Path) -> None:
    result = helm("template", RELEASE, str(CHART), "--set", "replicaCount=0", tmp=tmp_path)
    assert result.returncode != 0 and "replicaCount" in result.stderr
    result = helm("template", RELEASE, str(CHART), "--set", "resyncSecond=3", tmp=tmp_path)
    assert result.returncode != 0 and "resyncSecond" in result.stderr
    result = helm("template", RELEASE, str(CHART), "--set", "monitoring.operatorMetrics.port=8080", tmp=tmp_path)
    assert result.returncode != 0 and "operatorMetrics/port" in result.stderr, "the liveness probe's port"
    result = helm("template", RELEASE, str(CHART), "--set", "monitoring.labels.release=1", tmp=tmp_path)
    assert result.returncode != 0 and "monitoring/labels/release" in result.stderr, "a label value is a string"


def test_install_creates_crds_rbac_and_peering(installed_chart: ControlPlane) -> None:
    status = installed_chart.helm("status", RELEASE, "-n", RELEASE_NAMESPACE, "-o", "yaml").stdout
    assert yaml.safe_load(status)["info"]["status"] == "deployed"
    names = installed_chart.kubectl("get", "crd", "-o", "name").stdout.split()
    assert {
        "customresourcedefinition.apiextensions.k8s.io/inferencedeployments.shoal.dev",
        "customresourcedefinition.apiextensions.k8s.io/clusterkopfpeerings.kopf.dev",
    } <= set(names)
    installed_chart.kubectl("get", "clusterkopfpeering", "shoal")
    sa = f"system:serviceaccount:{RELEASE_NAMESPACE}:shoal"
    can = lambda *what: installed_chart.kubectl("auth", "can-i", *what, "--as", sa, check=False).stdout.strip()  # noqa: E731
    assert can("patch", "deployments.apps", "-n", "anywhere") == "yes"
    assert can("delete", "deployments.apps", "-n", "anywhere") == "no"
    assert can("get", "secrets", "-n", "anywhere") == "no"


WEBHOOK = ["--set", "autoscaler.alertmanagerWebhook.enabled=true,autoscaler.prometheusUrl=http://prom:9090"]


@pytest.mark.parametrize("prometheus_operator", [False, True])
def test_the_alertmanager_receiver_is_a_service_with_its_token_and_an_alertmanager_config(
    tmp_path: Path, prometheus_operator: bool
) -> None:
    apis = ["--api-versions", "monitoring.coreos.com/v1alpha1/AlertmanagerConfig"] if prometheus_operator else []
    result = helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *WEBHOOK, *apis, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.stdout) if d}
    service = docs[("Service", f"{RELEASE}-alerts")]
    assert service["spec"]["ports"] == [{"name": "alerts", "port": 9094, "targetPort": "alerts", "protocol": "TCP"}]
    pod = docs[("Deployment", f"{RELEASE}-operator")]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert {
        "--prometheus-url=http://prom:9090",
        "--alerts-port=9094",
        "--alerts-token-file=/etc/shoal/alerts/token",
    } <= set(args)
    assert {"name": "alerts-token", "secret": {"secretName": "shoal-alerts-token"}} in pod["volumes"]
    configs = [d for (kind, _), d in docs.items() if kind == "AlertmanagerConfig"]
    assert len(configs) == (1 if prometheus_operator else 0)
    if configs:
        webhook = configs[0]["spec"]["receivers"][0]["webhookConfigs"][0]
        assert webhook["url"] == f"http://{RELEASE}-alerts.{RELEASE_NAMESPACE}.svc:9094/alerts"
        assert webhook["httpConfig"]["authorization"]["credentials"] == {"name": "shoal-alerts-token", "key": "token"}
        assert configs[0]["spec"]["route"]["matchers"] == [{"name": "infd", "matchType": "=~", "value": ".+"}]


@pytest.mark.parametrize(
    ("values", "gateway"),
    [
        ([], "ghcr.io/shoal-dev/shoal:0.1.0"),
        (["--set", "image.repository=mirror.local/shoal,image.tag=v7"], "mirror.local/shoal:v7"),
        (["--set", "gatewayImage=mirror.local/gw:1,engineImages.vllm=mirror.local/vllm:2"], "mirror.local/gw:1"),
    ],
)
def test_the_charts_default_images_reach_the_operator(values: list[str], gateway: str, tmp_path: Path) -> None:
    """The gateway image defaults to the chart's own (the slim image runs operator and gateway alike), so a
    registry mirror set once serves both; engineImages name an engine kind's image."""
    result = helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *values, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    deployment = next(d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--gateway-image=")] == [f"--gateway-image={gateway}"]
    engines = [a for a in args if a.startswith("--engine-image=")]
    assert engines == (["--engine-image=vllm=mirror.local/vllm:2"] if "engineImages" in " ".join(values) else [])
    parsed = build_parser().parse_args(args)  # the operator's own parser takes them
    assert parsed.gateway_image == gateway
