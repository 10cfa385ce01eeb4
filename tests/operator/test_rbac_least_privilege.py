"""The chart's ClusterRole grants exactly what the operator uses, derived from the code: the kinds its builders
apply, the Secret it creates, the resources its kopf handlers watch, and the Role it grants the gateway (which
RBAC's escalation check makes it hold). What kopf itself needs is listed by hand, from kopf's documented RBAC.
A permission the chart grants and nothing uses fails, and so does a use the chart forgets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import CHART, RELEASE, RELEASE_NAMESPACE
from test_helm_chart import helm

from shoal.operator.builders import build_children
from shoal.operator.builders.access import role
from shoal.operator.builders.api_keys import generated_api_key_secret
from shoal.operator.crd import CRD_NAME, build_crd
from shoal.operator.handlers import OperatorConfig, build_registry
from shoal.operator.kube import PLURALS
from shoal.operator.naming import Owner
from shoal.operator.spec import GROUP, PLURAL, InferenceDeploymentSpec

pytestmark = pytest.mark.kube
Permission = tuple[str, str, str]  # (API group, resource, verb)
OWNER = Owner("any", "any", "uid")

KOPF_OWN: set[Permission] = {
    # peering between operator replicas (kopf's documented RBAC)
    *{("kopf.dev", r, v) for r in ("clusterkopfpeerings", "kopfpeerings") for v in ("get", "list", "watch", "patch")},
    # noticing CRDs installed after start
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    # Events (the Degraded announcements), through whichever events API the cluster serves
    ("", "events", "create"),
    ("events.k8s.io", "events", "create"),
    # children carry blockOwnerDeletion owner references to the custom resource
    (GROUP, f"{PLURAL}/finalizers", "update"),
}


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def used_by_the_operator() -> set[Permission]:
    uses = set(KOPF_OWN)
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})
    for child in build_children(OWNER, spec, 1, prometheus_operator=True):  # server-side applied
        uses |= {(_group(child["apiVersion"]), PLURALS[child["kind"]], verb) for verb in ("create", "patch")}
    uses.add(("", "pods", "patch"))  # the standby pool's label moves (KubeClient.label_pod)
    secret = generated_api_key_secret(OWNER, "sk-any")  # created once, never read
    uses.add((_group(secret["apiVersion"]), PLURALS[secret["kind"]], "create"))
    registry = build_registry(OperatorConfig())
    handlers = [
        *registry._indexing.get_all_handlers(),
        *registry._changing.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
    ]
    for handler in handlers:
        selector = handler.selector
        resource = selector.plural or selector.any_name or (PLURAL if selector.group == GROUP else None)
        assert resource, f"cannot tell what handler {handler.id} watches"
        uses |= {(selector.group, resource, "list"), (selector.group, resource, "watch")}
        if selector.group == GROUP:  # kopf's progress annotations on the object, the reconciler's status
            uses |= {(GROUP, resource, "patch"), (GROUP, f"{resource}/status", "patch")}
    for rule in role(OWNER)["rules"]:
        uses |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    crd = build_crd()  # --manage-crd (crds.manage, on by default): its own CRD read, then server-side applied
    uses |= {(_group(crd["apiVersion"]), PLURALS[crd["kind"]], verb) for verb in ("get", "patch")}
    return uses


def cluster_role_rules(tmp: Path, *values: str) -> list[dict[str, Any]]:
    result = helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *values, tmp=tmp)
    assert result.returncode == 0, result.stderr
    (cluster_role,) = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] in ("ClusterRole", "Role")]
    return list(cluster_role["rules"])


def granted_by_the_chart(tmp: Path) -> set[Permission]:
    return {
        (g, r, v)
        for rule in cluster_role_rules(tmp)
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_the_chart_grants_exactly_what_the_operator_uses(tmp_path: Path) -> None:
    granted, used = granted_by_the_chart(tmp_path), used_by_the_operator()
    assert not granted - used, f"granted but never used: {sorted(granted - used)}"
    assert not used - granted, f"used but not granted: {sorted(used - granted)}"


def test_the_operator_never_reads_or_deletes_secrets(tmp_path: Path) -> None:
    secrets = {verb for group, resource, verb in granted_by_the_chart(tmp_path) if (group, resource) == ("", "secrets")}
    assert secrets == {"create"}


def test_crd_management_reaches_its_own_crd_only(tmp_path: Path) -> None:
    def crd_writes(*values: str) -> list[dict[str, Any]]:
        rules = cluster_role_rules(tmp_path, *values)
        return [
            r for r in rules if "customresourcedefinitions" in r["resources"] and set(r["verbs"]) & {"get", "patch"}
        ]

    (rule,) = crd_writes()
    assert rule["resourceNames"] == [CRD_NAME] and sorted(rule["verbs"]) == ["get", "patch"]
    assert crd_writes("--set", "crds.manage=false") == []
