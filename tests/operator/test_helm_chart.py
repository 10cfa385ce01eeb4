"""The Helm chart: lints and renders clean, validates its values, installs into the real apiserver."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from operator_harness import CHART, RELEASE, RELEASE_NAMESPACE
from support.kube_testbed import ControlPlane, kube_testbin_dir

from shoal.cli import build_parser

pytestmark = pytest.mark.kube
ALL_FEATURES = ["--set", "prometheusRule.enabled=true,grafanaDashboard.enabled=true"]


def helm(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {f"HELM_{k}_HOME": str(tmp / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
    return subprocess.run(
        [str(kube_testbin_dir() / "helm"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=120,
    )


@pytest.mark.parametrize("values", [[], ALL_FEATURES, ["--set", "watchNamespaces={team-a,team-b}"]])
def test_lint_is_clean(values: list[str], tmp_path: Path) -> None:
    result = helm("lint", "--strict", str(CHART), *values, tmp=tmp_path)
    assert result.returncode == 0 and "0 chart(s) failed" in result.stdout, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_template_renders_every_object(tmp_path: Path) -> None:
    result = helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *ALL_FEATURES, tmp=tmp_path)
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
        "ServiceAccount",
    ]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert "delete" not in rule["verbs"], "children are removed by the garbage collector, never by the operator"
    dashboard = next(d for d in docs if d["kind"] == "ConfigMap")
    assert yaml.safe_load(dashboard["data"]["shoal.json"])["uid"] == "shoal-fleets"
    alerts = next(d for d in docs if d["kind"] == "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} == {"ShoalEngineQueueBacklog", "ShoalEngineTTFTHigh", "ShoalEngineKVCacheFull"}


def test_values_schema_rejects_bad_values(tmp_path: Path) -> None:
    result = helm("template", RELEASE, str(CHART), "--set", "replicaCount=0", tmp=tmp_path)
    assert result.returncode != 0 and "replicaCount" in result.stderr
    result = helm("template", RELEASE, str(CHART), "--set", "resyncSecond=3", tmp=tmp_path)
    assert result.returncode != 0 and "resyncSecond" in result.stderr


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
