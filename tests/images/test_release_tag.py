"""One tag: shoal.__version__. The CRD's default images carry it (spec.py reads it), the package metadata reads it
(pyproject's dynamic version); the chart cannot read Python, so it is held to it here."""

from __future__ import annotations

import importlib.metadata
import tomllib

import yaml
from image_harness import REPO

from shoal import __version__
from shoal.operator.spec import DEFAULT_ENGINE_IMAGE, DEFAULT_GATEWAY_IMAGE


def test_chart_and_package_carry_the_release_tag() -> None:
    chart = yaml.safe_load((REPO / "charts" / "shoal" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "shoal" / "values.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert f"{values['image']['repository']}:{chart['appVersion']}" == DEFAULT_GATEWAY_IMAGE
    assert DEFAULT_ENGINE_IMAGE.endswith(f":{__version__}")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "shoal.__version__"}
    assert importlib.metadata.version("shoal") == __version__
