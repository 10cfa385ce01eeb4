"""Specs the apiserver itself rejects (schema and CEL rules generated from the models), with clear messages."""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import REPO, apply, example
from support.kube_testbed import ControlPlane

pytestmark = pytest.mark.kube


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"replicas": {"min": 3, "max": 2}},
            'spec.replicas: Invalid value: "object": replicas.min must be less than or equal to replicas.max',
        ),
        (
            {"replicas": {"min": 1, "max": 2, "count": 4}},
            "replicas.count must lie between replicas.min and replicas.max",
        ),
        (
            {"replicas": {"min": -1}},
            "spec.replicas.min: Invalid value: -1: spec.replicas.min in body should be greater than or equal to 0",
        ),
        (
            {"gateway": {"routingPolicy": "fastest"}},
            'spec.gateway.routingPolicy: Unsupported value: "fastest": supported values: "prefix-aware", '
            '"least-load", "round-robin"',
        ),
        ({"autoscaling": {"ttftP95Seconds": 0}}, "spec.autoscaling.ttftP95Seconds: Invalid value: 0"),
        (
            {"autoscaling": {"mode": "Sometimes"}},
            'spec.autoscaling.mode: Unsupported value: "Sometimes": supported values: "Act", "Recommend"',
        ),
        ({"model": None}, "spec.model: Required value"),
        (
            {"engine": {"resources": {"gpus": 2}}},
            'spec.engine.resources: Invalid value: "object": engine.resources.gpus must be 0 or 1: Shoal\'s engine '
            "runs a model on one GPU",
        ),
    ],
    ids=[
        "min-over-max",
        "count-out-of-bounds",
        "negative-replicas",
        "unknown-policy",
        "zero-ttft-target",
        "unknown-autoscaling-mode",
        "missing-model",
        "gpus-beyond-one",
    ],
)
def test_apiserver_rejects(installed_chart: ControlPlane, spec: dict[str, Any], message: str) -> None:
    body = example("invalid", **spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    result = apply(installed_chart, "default", body)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert installed_chart.kubectl("get", "infd", "invalid", "-n", "default", check=False).returncode != 0


def test_valid_example_is_accepted_and_defaulted(installed_chart: ControlPlane) -> None:
    result = installed_chart.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        "default",
        "-o",
        "yaml",
        "-f",
        str(REPO / "examples" / "smollm2-cpu.yaml"),
        "-f",
        str(REPO / "examples" / "llama-gpu.yaml"),
    )
    assert result.returncode == 0, result.stderr
    assert "blockSize: 16" in result.stdout and "scaleDownStabilizationSeconds: 300" in result.stdout
