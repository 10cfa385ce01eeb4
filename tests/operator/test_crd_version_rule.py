"""The rule ``--manage-crd`` applies at start-up: the installed InferenceDeployment CRD is replaced only when it
is older than the operator (or from before the version annotation), never by a downgrade, never installed."""

from __future__ import annotations

from typing import Any

import pytest

from shoal import __version__
from shoal.operator.crd import VERSION_ANNOTATION, build_crd
from shoal.operator.crd_upgrade import decide, release


def installed(version: str | None) -> dict[str, Any]:
    annotations = {} if version is None else {VERSION_ANNOTATION: version}
    return {"metadata": {"name": "inferencedeployments.shoal.dev", "annotations": annotations}}


@pytest.mark.parametrize(
    ("theirs", "ours", "apply"),
    [
        ("0.1.0", "0.2.0", True),
        ("0.9.3", "0.10.0", True),  # numbers, not strings
        ("1.0", "1.0.1", True),
        ("0.2.0", "0.2.0", False),  # the same release: nothing to do
        ("0.3.0", "0.2.0", False),  # never a downgrade
        ("0.2.0rc1", "0.2.0", False),  # a pre-release counts as its release
        ("v0.1.0", "0.2.0", True),
        ("banana", "0.2.0", False),  # no version: left alone
    ],
)
def test_only_an_older_crd_is_replaced(theirs: str, ours: str, apply: bool) -> None:
    assert decide(installed(theirs), ours).apply is apply


def test_a_crd_from_before_the_annotation_is_older() -> None:
    assert decide(installed(None), "0.1.0").apply
    assert decide({"metadata": {"name": "x"}}, "0.1.0").apply


def test_a_missing_crd_is_not_installed_by_the_operator() -> None:
    decision = decide(None, "0.1.0")
    assert not decision.apply
    assert "not installed" in decision.reason


def test_the_shipped_crd_carries_this_release() -> None:
    crd = build_crd()
    assert crd["metadata"]["annotations"][VERSION_ANNOTATION] == __version__
    assert release(__version__) is not None
    assert not decide(crd, __version__).apply  # helm's crds/ of this release is left as it is
