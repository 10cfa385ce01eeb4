"""The chart's README: its values table is the one hack/chart_readme.py writes from values.yaml (helm-docs'
format), every value has a description, and the table is helm-docs' own where helm-docs is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from operator_harness import CHART, REPO

sys.path.insert(0, str(REPO / "hack"))
import chart_readme


def test_the_values_table_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "hack" / "chart_readme.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_every_value_has_a_description() -> None:
    assert chart_readme.undocumented() == []


def test_a_stale_table_is_named(tmp_path: Path) -> None:
    chart = tmp_path / "shoal"
    shutil.copytree(CHART, chart)
    values = chart / "values.yaml"
    values.write_text(values.read_text() + "# -- A value added without regenerating the README.\nextra: 1\n")
    readme = (chart / "README.md").read_text()
    assert chart_readme.rendered(readme, chart) != readme
    assert "| extra | int | `1` | A value added without regenerating the README. |" in chart_readme.table(chart)


@pytest.mark.skipif(shutil.which("helm-docs") is None, reason="helm-docs is not installed (a Go tool; optional)")
def test_helm_docs_writes_the_same_table(tmp_path: Path) -> None:
    chart = tmp_path / "shoal"
    shutil.copytree(CHART, chart)
    (chart / "README.md").unlink()
    subprocess.run(["helm-docs", "--chart-search-root", str(tmp_path)], check=True, capture_output=True)
    assert chart_readme.table() in (chart / "README.md").read_text()
