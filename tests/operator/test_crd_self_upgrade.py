"""``shoal operator --manage-crd`` on the test bed's apiserver, holding the chart's ServiceAccount token (so the
chart's RBAC, ``get`` and ``patch`` on that one CRD, is what is tested): an older InferenceDeployment CRD is
brought up to the operator's version at start-up and an object using the new field is then accepted; a newer CRD
is left alone; without the flag nothing changes. Each test puts the chart's CRD back as helm installed it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from crd_versions import (
    accepts_new_field,
    crd_version,
    has_new_field,
    live_crd,
    other_release_crd,
    put_crd_as_helm,
    shipped_crd,
)
from operator_harness import OperatorProcess
from support.kube_testbed import ControlPlane
from support.polling import eventually

from shoal import __version__
from shoal.operator.naming import FIELD_MANAGER

pytestmark = [pytest.mark.kube, pytest.mark.timeout(240)]


@pytest.fixture
def plane(installed_chart: ControlPlane) -> Iterator[ControlPlane]:
    yield installed_chart
    put_crd_as_helm(installed_chart, shipped_crd())


@contextlib.contextmanager
def operator_started(
    plane: ControlPlane, kubeconfig: Path, workdir: Path, namespace: str, *flags: str
) -> Iterator[OperatorProcess]:
    """An operator watching only ``namespace`` (empty), past its startup handlers: they run in order and the
    metrics page's comes after the CRD's, so once the page answers the CRD's handler is done."""
    process = OperatorProcess(plane, kubeconfig, workdir / "operator.log", "--namespace", namespace, *flags)

    def answers() -> bool:
        assert process.process.poll() is None, f"operator exited:\n{process.log()[-3000:]}"
        with contextlib.suppress(OSError):
            return bool(process.metrics())
        return False

    try:
        eventually(answers, 90, "the operator's metrics page")
        yield process
    finally:
        process.stop()


def test_an_older_crd_is_brought_up_to_the_operators_version(
    plane: ControlPlane, operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    put_crd_as_helm(plane, other_release_crd("0.0.1"))
    refused = accepts_new_field(plane, namespace)
    assert refused.returncode != 0 and "image" in refused.stderr, refused.stdout + refused.stderr

    with operator_started(plane, operator_kubeconfig, tmp_path, namespace, "--manage-crd") as process:
        eventually(lambda: has_new_field(plane), 30, "the new field in the CRD")
        assert f"updated from 0.0.1 to {__version__}" in process.log()
    assert crd_version(plane) == __version__
    served = [v["schema"] for v in live_crd(plane)["spec"]["versions"]]
    assert served == [v["schema"] for v in shipped_crd()["spec"]["versions"]]
    managers = {(f["manager"], f["operation"]) for f in live_crd(plane)["metadata"]["managedFields"]}
    assert (FIELD_MANAGER, "Apply") in managers
    accepted = accepts_new_field(plane, namespace)
    assert accepted.returncode == 0, accepted.stderr
    assert yaml.safe_load(accepted.stdout)["spec"]["gateway"]["image"] == "registry.example/shoal:custom"


def test_a_crd_without_the_version_annotation_counts_as_older(
    plane: ControlPlane, operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    put_crd_as_helm(plane, other_release_crd(None))
    with operator_started(plane, operator_kubeconfig, tmp_path, namespace, "--manage-crd"):
        eventually(lambda: has_new_field(plane), 30, "the new field in the CRD")
    assert crd_version(plane) == __version__


def test_a_newer_crd_is_left_alone(
    plane: ControlPlane, operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    put_crd_as_helm(plane, other_release_crd("99.0.0"))
    with operator_started(plane, operator_kubeconfig, tmp_path, namespace, "--manage-crd") as process:
        assert "is at 99.0.0, not older" in process.log()
    assert not has_new_field(plane)
    assert crd_version(plane) == "99.0.0"


def test_without_the_flag_the_crd_is_not_touched(
    plane: ControlPlane, operator_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    put_crd_as_helm(plane, other_release_crd("0.0.1"))
    with operator_started(plane, operator_kubeconfig, tmp_path, namespace) as process:
        assert "CRD" not in process.log()
    assert not has_new_field(plane)
    assert crd_version(plane) == "0.0.1"
    assert FIELD_MANAGER not in {f["manager"] for f in live_crd(plane)["metadata"]["managedFields"]}
