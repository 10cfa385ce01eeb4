"""InferenceDeployment CRDs of other releases for the upgrade tests: the chart's CRD with a field removed (what an
older release shipped) and a version annotation of choice, put in place exactly as Helm installs it."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml
from operator_harness import CHART, example
from support.kube_testbed import ControlPlane

from shoal.operator.crd import CRD_NAME, VERSION_ANNOTATION

CRD_FILE = CHART / "crds" / "shoal.dev_inferencedeployments.yaml"
CRD = f"crd/{CRD_NAME}"
# A field the chart's CRD has and the other releases' below lack.
NEW_FIELD = ("spec", "gateway", "image")


def shipped_crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_FILE.read_text())


def other_release_crd(version: str | None) -> dict[str, Any]:
    """The chart's CRD without ``NEW_FIELD``, annotated as release ``version`` (None: no annotation, as the
    releases before the annotation shipped it)."""
    crd = shipped_crd()
    annotations = crd["metadata"].pop("annotations")
    if version is not None:
        crd["metadata"]["annotations"] = annotations | {VERSION_ANNOTATION: version}
    for served in crd["spec"]["versions"]:
        properties = served["schema"]["openAPIV3Schema"]["properties"]
        for name in NEW_FIELD[:-1]:
            properties = properties[name]["properties"]
        del properties[NEW_FIELD[-1]]
    return crd


def put_crd_as_helm(plane: ControlPlane, crd: dict[str, Any]) -> None:
    """Makes the live CRD exactly ``crd``, owned by helm alone: replaced (fields it lacks are gone), its field
    managers cleared (no earlier ``shoal-operator`` apply keeps owning a field), then applied as helm."""
    manifest = yaml.safe_dump(crd)
    plane.kubectl("replace", "-f", "-", input=manifest)
    plane.kubectl("patch", CRD, "--type=merge", "-p", '{"metadata": {"managedFields": [{}]}}')
    plane.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=helm", "-f", "-", input=manifest
    )  # fmt: skip
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", CRD)


def live_crd(plane: ControlPlane) -> dict[str, Any]:
    return yaml.safe_load(plane.kubectl("get", CRD, "-o", "yaml", "--show-managed-fields").stdout)


def has_new_field(plane: ControlPlane) -> bool:
    properties = live_crd(plane)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for name in NEW_FIELD[:-1]:
        properties = properties[name]["properties"]
    return NEW_FIELD[-1] in properties


def crd_version(plane: ControlPlane) -> str | None:
    return (live_crd(plane)["metadata"].get("annotations") or {}).get(VERSION_ANNOTATION)


def accepts_new_field(plane: ControlPlane, namespace: str) -> subprocess.CompletedProcess[str]:
    """A server-side dry run of an InferenceDeployment that sets ``NEW_FIELD`` (kubectl's strict field validation
    refuses a field the CRD lacks); the stored object comes back as YAML."""
    body = example("new-field")
    body["spec"]["gateway"]["image"] = "registry.example/shoal:custom"
    return plane.kubectl(
        "apply", "--dry-run=server", "-o", "yaml", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False
    )
