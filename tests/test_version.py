"""``shoal --version`` prints the package's one version, which the chart's appVersion (the images' tag) repeats."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

import shoal

CHART = Path(__file__).resolve().parents[1] / "charts" / "shoal" / "Chart.yaml"


def test_version_prints_the_package_version() -> None:
    done = subprocess.run([sys.executable, "-m", "shoal.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"shoal {shoal.__version__}"


def test_the_charts_app_version_is_the_package_version() -> None:
    assert yaml.safe_load(CHART.read_text())["appVersion"] == shoal.__version__
