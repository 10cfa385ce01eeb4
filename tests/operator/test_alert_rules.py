"""Shoal's alert rules are valid Prometheus rules (checked by the real `promtool`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from shoal.operator.builders.monitoring import prometheus_rule
from shoal.operator.generated import render_chart_alerts
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec


def promtool_check(tmp_path: Path, groups: list[dict]) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package (`make system-deps`)"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_chart_alerts_pass_promtool(tmp_path: Path) -> None:
    rules = yaml.safe_load(render_chart_alerts())
    result = promtool_check(tmp_path, [{"name": "shoal.fleet", "rules": rules}])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 3 rules found" in result.stdout


def test_per_deployment_rule_passes_promtool(tmp_path: Path) -> None:
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}})
    groups = prometheus_rule(Owner("chat", "team-a", "uid"), spec)["spec"]["groups"]
    result = promtool_check(tmp_path, groups)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a malformed expression is refused."""
    result = promtool_check(tmp_path, [{"name": "g", "rules": [{"alert": "X", "expr": "sum by (("}]}])
    assert result.returncode != 0
