"""The Prometheus Operator's build (hack/prometheus-operator/build.sh): when it is missing, its test skips with the
command that builds it, and a build without Go says what to install."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from support.prometheus_operator import BUILD_SCRIPT, PrometheusOperatorMissing, prometheus_operator_dir


def test_an_unbuilt_cache_points_at_make_prometheus_operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    with pytest.raises(PrometheusOperatorMissing, match="make prometheus-operator"):
        prometheus_operator_dir()


def test_the_build_dir_follows_the_pin(tmp_path: Path) -> None:
    env = dict(os.environ, SHOAL_CACHE=str(tmp_path))
    result = subprocess.run(["bash", str(BUILD_SCRIPT), "--dir"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).parent == tmp_path / "prometheus-operator"
    go_mod = (BUILD_SCRIPT.parent / "go.mod").read_text()
    (version,) = re.findall(r"github\.com/prometheus-operator/prometheus-operator (v[0-9.]+)", go_mod)
    assert Path(result.stdout.strip()).name.startswith(f"{version}-")


def test_a_build_without_go_says_what_is_missing(tmp_path: Path) -> None:
    env = dict(os.environ, PATH="/usr/bin:/bin", SHOAL_CACHE=str(tmp_path))  # /usr/local/go/bin is not on it
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert "no Go toolchain" in result.stderr and "Install Go" in result.stderr
