"""``helm upgrade`` and the InferenceDeployment CRD on the test bed's apiserver. Helm never upgrades ``crds/``; with
``crds.manage`` (the default) the upgraded operator does, at start-up. Without it, the README's commands do.

kwok runs no containers, so "the upgraded release's operator" is a local ``shoal operator`` process started with
the arguments of the Deployment ``helm upgrade`` wrote, holding its ServiceAccount's token (the chart's RBAC)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_versions import (
    CRD,
    CRD_FILE,
    accepts_new_field,
    crd_version,
    has_new_field,
    other_release_crd,
    put_crd_as_helm,
    shipped_crd,
)
from operator_harness import CHART, REPO, OperatorProcess
from support.kube_testbed import ControlPlane
from support.polling import eventually

from shoal import __version__

pytestmark = pytest.mark.kube


def upgrade_commands() -> str:
    """The bash block of the README's "Upgrade" section that applies the CRDs by hand."""
    section = (CHART / "README.md").read_text().split("## Upgrade", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", section, re.S) if "helm show crds" in b]
    assert blocks, "charts/shoal/README.md's Upgrade section has no bash block applying `helm show crds`"
    return blocks[0]


def previous_chart(tmp_path: Path) -> Path:
    """charts/shoal as the release before it shipped it: an older version, its CRD without the new field nor the
    version annotation, no CRD management (no ``--manage-crd``, no RBAC for it)."""
    chart = tmp_path / "shoal-previous"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta | {"version": "0.0.1"}))
    (chart / "crds" / CRD_FILE.name).write_text(yaml.safe_dump(other_release_crd(None)))
    values = (chart / "values.yaml").read_text()
    (chart / "values.yaml").write_text(values.replace("  manage: true\n", "  manage: false\n"))
    return chart


def operator_arguments(manifest: str) -> list[str]:
    """The operator container's args from a release's manifest, less the liveness and metrics addresses (the
    harness gives the local process free ports)."""
    deployment = next(
        d
        for d in yaml.safe_load_all(manifest)
        if d and d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "shoal.operator"] and container["args"][0] == "operator"
    return [a for a in container["args"][1:] if not a.startswith(("--liveness=", "--metrics-port="))]


@pytest.fixture
def fresh_plane(tmp_path: Path) -> Iterator[ControlPlane]:
    """An apiserver of this test's own: helm installs a chart's CRD only where none exists yet."""
    plane = ControlPlane(tmp_path / "kube").start()
    try:
        yield plane
    finally:
        plane.stop()


def test_helm_upgrade_then_the_upgraded_operator_updates_the_crd(fresh_plane: ControlPlane, tmp_path: Path) -> None:
    plane = fresh_plane
    install = ["--namespace", "shoal-system", "--set", "replicaCount=1"]
    plane.helm("install", "shoal", str(previous_chart(tmp_path)), "--create-namespace", *install)
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", CRD)
    assert not has_new_field(plane) and crd_version(plane) is None

    plane.helm("upgrade", "shoal", str(CHART), *install)
    assert not has_new_field(plane), "helm upgrade changed crds/ itself"
    arguments = operator_arguments(plane.helm("get", "manifest", "shoal", "--namespace", "shoal-system").stdout)
    assert "--manage-crd" in arguments

    account = plane.kubeconfig_for_service_account("shoal-system", "shoal", create=False)
    operator = OperatorProcess(plane, account.kubeconfig, tmp_path / "operator.log", *arguments)
    try:
        eventually(lambda: has_new_field(plane), 90, "the upgraded operator to update the CRD", detail=operator.log)
    finally:
        operator.stop()
    assert crd_version(plane) == __version__
    assert f"updated to {__version__}" in operator.log()
    accepted = accepts_new_field(plane, "default")
    assert accepted.returncode == 0, accepted.stderr


def test_the_readme_upgrade_path_updates_the_crd_when_the_operator_does_not(
    installed_chart: ControlPlane, tmp_path: Path
) -> None:
    plane = installed_chart
    put_crd_as_helm(plane, other_release_crd("0.0.1"))  # a cluster on the previous chart version
    try:
        plane.helm(
            "upgrade", "--install", "shoal-upgrade", str(CHART), "--namespace", "shoal-upgrade", "--create-namespace",
            "--set", "peering.name=shoal-upgrade,replicaCount=1,crds.manage=false",
        )  # fmt: skip
        assert not has_new_field(plane), "helm upgrade changed crds/: the README's warning is wrong"

        script = upgrade_commands().replace("helm upgrade shoal ", "helm upgrade shoal-upgrade ")
        script = script.replace("--namespace shoal-system", "--namespace shoal-upgrade --reuse-values")
        helm_home = plane.workdir / "helm"
        env = plane.env() | {f"HELM_{k}_HOME": str(helm_home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert has_new_field(plane)
        served: list[dict[str, Any]] = yaml.safe_load(plane.kubectl("get", CRD, "-o", "yaml").stdout)["spec"][
            "versions"
        ]
        assert [v["schema"] for v in served] == [v["schema"] for v in shipped_crd()["spec"]["versions"]]
        plane.helm("uninstall", "shoal-upgrade", "--namespace", "shoal-upgrade", "--wait")
        plane.kubectl("get", CRD)  # uninstalling leaves the CRD (and every InferenceDeployment) in place
    finally:
        put_crd_as_helm(plane, shipped_crd())
