"""The built helm installs, upgrades and uninstalls a chart on the test apiserver, and a chart's RBAC can be
exercised with a ServiceAccount's own credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.kube_testbed import ControlPlane

pytestmark = pytest.mark.kube

TEMPLATE = """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: {{ .Release.Name }}-reader, namespace: {{ .Release.Namespace }}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}-settings, namespace: {{ .Release.Namespace }}}
data: {replicas: {{ .Values.replicas | quote }}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: {{ .Release.Name }}-reader, namespace: {{ .Release.Namespace }}}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: {{ .Release.Name }}-reader, namespace: {{ .Release.Namespace }}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{ .Release.Name }}-reader}
subjects: [{kind: ServiceAccount, name: {{ .Release.Name }}-reader, namespace: {{ .Release.Namespace }}}]
"""


def write_chart(root: Path) -> Path:
    chart = root / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": "demo", "version": "0.1.0"}))
    (chart / "values.yaml").write_text(yaml.safe_dump({"replicas": 1}))
    (chart / "templates" / "all.yaml").write_text(TEMPLATE)
    return chart


def test_helm_release_lifecycle_and_chart_rbac(kube_apiserver: ControlPlane, tmp_path: Path) -> None:
    chart = write_chart(tmp_path)
    kube_apiserver.helm("install", "demo", str(chart), "-n", "helm-test", "--create-namespace", "--wait")
    kube_apiserver.helm("upgrade", "demo", str(chart), "-n", "helm-test", "--set", "replicas=3")
    settings = kube_apiserver.kubectl(
        "get", "configmap", "demo-settings", "-n", "helm-test", "-o", "jsonpath={.data.replicas}"
    ).stdout
    assert settings == "3"
    assert "demo" in kube_apiserver.helm("list", "-n", "helm-test", "-q").stdout.split()

    reader = kube_apiserver.kubeconfig_for_service_account("helm-test", "demo-reader", create=False)
    allowed = kube_apiserver.kubectl(
        "get", "configmap", "demo-settings", "-n", "helm-test", kubeconfig=reader.kubeconfig
    )
    assert "demo-settings" in allowed.stdout
    denied = kube_apiserver.kubectl(
        "delete", "configmap", "demo-settings", "-n", "helm-test", kubeconfig=reader.kubeconfig, check=False
    )
    assert denied.returncode != 0 and "forbidden" in denied.stderr

    kube_apiserver.helm("uninstall", "demo", "-n", "helm-test", "--wait")
    gone = kube_apiserver.kubectl("get", "configmap", "demo-settings", "-n", "helm-test", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
