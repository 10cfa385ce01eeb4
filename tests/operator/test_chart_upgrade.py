"""The chart README's CRD upgrade path, run as written on the test bed's apiserver: `helm upgrade` alone leaves an
older InferenceDeployment CRD in place, the README's commands replace it with the chart's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import CHART, REPO
from support.kube_testbed import ControlPlane

pytestmark = pytest.mark.kube
CRD_FILE = CHART / "crds" / "shoal.dev_inferencedeployments.yaml"
CRD = "crd/inferencedeployments.shoal.dev"
# A field the chart's CRD has and the older one below lacks.
NEW_FIELD = ("spec", "gateway", "image")


def upgrade_commands() -> str:
    """The bash block of the README's "Upgrade" section."""
    section = (CHART / "README.md").read_text().split("## Upgrade", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found, "charts/shoal/README.md's Upgrade section has no bash block"
    return found.group(1)


def older_crd() -> dict[str, Any]:
    """The chart's CRD as a previous version shipped it: without ``NEW_FIELD``."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    for version in crd["spec"]["versions"]:
        properties = version["schema"]["openAPIV3Schema"]["properties"]
        for name in NEW_FIELD[:-1]:
            properties = properties[name]["properties"]
        del properties[NEW_FIELD[-1]]
    return crd


def has_new_field(plane: ControlPlane) -> bool:
    crd = yaml.safe_load(plane.kubectl("get", CRD, "-o", "yaml").stdout)
    properties = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for name in NEW_FIELD[:-1]:
        properties = properties[name]["properties"]
    return NEW_FIELD[-1] in properties


def test_the_readme_upgrade_path_updates_the_crd_that_helm_upgrade_leaves(
    kube_apiserver: ControlPlane, tmp_path: Path
) -> None:
    plane = kube_apiserver
    # a cluster on the previous chart version: its CRD, applied as helm's install left it
    plane.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=helm",
        "-f",
        "-",
        input=yaml.safe_dump(older_crd()),
    )
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", CRD)
    assert not has_new_field(plane)

    plane.helm(
        "upgrade", "--install", "shoal-upgrade", str(CHART), "--namespace", "shoal-upgrade", "--create-namespace",
        "--set", "peering.name=shoal-upgrade,replicaCount=1",
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
    served = yaml.safe_load(plane.kubectl("get", CRD, "-o", "yaml").stdout)["spec"]["versions"]
    shipped = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"]
    assert [v["schema"] for v in served] == [v["schema"] for v in shipped]
    plane.helm("uninstall", "shoal-upgrade", "--namespace", "shoal-upgrade", "--wait")
    plane.kubectl("get", CRD)  # uninstalling leaves the CRD (and every InferenceDeployment) in place
