"""The operator brings the InferenceDeployment CRD up to its own version at start-up (``--manage-crd``, the chart's
``crds.manage``): Helm installs a chart's ``crds/`` once and never upgrades them, so after ``helm upgrade`` the
cluster would keep the old schema and prune every new field from the objects it stores.

The law: the CRD this operator generates (:func:`.crd.build_crd`, the same code that writes ``crds/``) is
server-side applied as ``shoal-operator`` when the installed one is older, i.e. its ``shoal.dev/crd-version``
annotation names an earlier release than this package, or it has none (a CRD from before the annotation). Named
rules:

- *never downgrade*: an equal or newer version is left alone (in a rolling upgrade an old replica may start after a
  new one has applied its CRD);
- *not ours to install*: a missing CRD is left missing (Helm's ``crds/`` installs it; ``--skip-crds`` means the
  platform team owns it), and the chart grants only ``get`` and ``patch`` on that one CRD;
- *unreadable version*: an annotation that is no release number is left alone, with the reason.

Versions compare by their leading release numbers (``0.2.0rc1`` as ``0.2.0``): a pre-release never replaces its
release's CRD, nor the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shoal import __version__
from shoal.operator.crd import CRD_NAME, VERSION_ANNOTATION, build_crd
from shoal.operator.kube import KubeClient

CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"


@dataclass(frozen=True)
class CrdDecision:
    apply: bool
    reason: str


def release(version: str) -> tuple[int, ...] | None:
    """A version's leading release numbers (``"0.10.2rc1"`` -> ``(0, 10, 2)``); None when it has none."""
    found = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def decide(installed: Mapping[str, Any] | None, version: str) -> CrdDecision:
    """Whether to apply this ``version``'s CRD over ``installed`` (the live object, None when absent)."""
    if installed is None:
        return CrdDecision(False, f"CRD {CRD_NAME} is not installed: left to the chart's crds/")
    annotations = installed.get("metadata", {}).get("annotations") or {}
    theirs = annotations.get(VERSION_ANNOTATION)
    if theirs is None:
        return CrdDecision(True, f"CRD {CRD_NAME} carries no {VERSION_ANNOTATION}: updated to {version}")
    installed_release, own_release = release(theirs), release(version)
    if installed_release is None or own_release is None:
        return CrdDecision(False, f"CRD {CRD_NAME}'s {VERSION_ANNOTATION} {theirs!r} is no version: left alone")
    if installed_release < own_release:
        return CrdDecision(True, f"CRD {CRD_NAME} updated from {theirs} to {version}")
    return CrdDecision(False, f"CRD {CRD_NAME} is at {theirs}, not older than {version}: left alone")


async def upgrade_crd(client: KubeClient) -> CrdDecision:
    """Reads the installed CRD and applies this version's where :func:`decide` says so."""
    decision = decide(await client.get(CRD_PATH), __version__)
    if decision.apply:
        await client.apply(build_crd())
    return decision
