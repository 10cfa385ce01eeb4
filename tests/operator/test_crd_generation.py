"""The CRD is generated from the typed spec: committed copies must be current and the schema structural."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from shoal.operator.crd import CRD_FILENAME, PRINTER_COLUMNS, SCALE_SUBRESOURCE, build_crd
from shoal.operator.generated import generated_files, stale_files
from shoal.operator.spec import InferenceDeploymentSpec

REPO = Path(__file__).resolve().parents[2]


def _schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node: Any, path: str = "$"):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def test_committed_generated_files_are_current() -> None:
    assert stale_files(REPO) == [], "run `shoal crd --write` (or `make crds`) and commit the result"


def test_stale_file_is_detected(tmp_path: Path) -> None:
    for path, text in generated_files(tmp_path).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert stale_files(tmp_path) == []
    chart_crd = next(p for p in generated_files(tmp_path) if "charts" in p.parts and p.parent.name == "crds")
    chart_crd.write_text(chart_crd.read_text().replace("minimum: 1", "minimum: 2", 1))
    assert stale_files(tmp_path) == [chart_crd]


def test_schema_is_structural() -> None:
    for path, node in _walk(_schema()):
        assert "$ref" not in node and "anyOf" not in node and "$defs" not in node, path
        if "properties" in node:
            assert node.get("type") == "object", f"{path} has properties but is not typed object"
            assert "additionalProperties" not in node, path
            for name, sub in node["properties"].items():
                assert "type" in sub or sub.get("x-kubernetes-int-or-string"), f"{path}.properties.{name} is untyped"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path


def _defaults_applied(schema: dict[str, Any], value: Any) -> Any:
    """What the apiserver's structural defaulting does: fill missing fields with defaults, top down."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        return value
    out = dict(value)
    for name, sub in schema.get("properties", {}).items():
        if name not in out and "default" in sub:
            out[name] = sub["default"]
        if name in out:
            out[name] = _defaults_applied(sub, out[name])
    return out


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v not in ([], {})}
    return value


def test_schema_defaults_equal_model_defaults() -> None:
    """An object the apiserver defaulted from the schema has exactly the model's defaults (empty lists and
    maps aside: absent and empty mean the same to the builders)."""
    minimal = {"model": {"source": "smollm2-135m"}}
    defaulted = _defaults_applied(_schema()["properties"]["spec"], minimal)
    expected = InferenceDeploymentSpec.model_validate(minimal).model_dump(by_alias=True, exclude_none=True)
    assert _without_empty(defaulted) == _without_empty(expected)


def test_cel_rules_are_declared_on_the_constrained_objects() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    rules = [r["rule"] for r in spec["replicas"]["x-kubernetes-validations"]]
    assert rules[0] == "self.min <= self.max"
    assert spec["gateway"]["properties"]["routingPolicy"]["enum"] == ["prefix-aware", "least-load", "round-robin"]
    assert _schema()["required"] == ["spec"] and spec["model"]["required"] == ["source"]


def test_printer_columns_and_scale_subresource_point_at_real_fields() -> None:
    version = build_crd()["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Model",
        "Ready",
        "Desired",
        "Queue",
        "TTFT-P95-Seconds",
        "Age",
    ]
    schema = _schema()
    for json_path in [c["jsonPath"] for c in PRINTER_COLUMNS] + list(SCALE_SUBRESOURCE.values()):
        node = schema
        for part in json_path.strip(".").split("."):
            node = node["properties"][part] if part != "creationTimestamp" else {"type": "string"}
        assert "type" in node, json_path
    assert version["subresources"]["scale"] == SCALE_SUBRESOURCE


def test_rendered_yaml_round_trips() -> None:
    path = REPO / "crds" / "shoal.dev_inferencedeployments.yaml"
    assert yaml.safe_load(path.read_text()) == build_crd()


def test_crd_command_prints_and_checks(tmp_path: Path) -> None:
    """`shoal crd` (here through `python -m shoal.operator`, the same parser) prints the committed YAML, and
    `--check` fails on a stale tree until `--write` fixes it."""
    command = [sys.executable, "-m", "shoal.operator", "crd"]
    printed = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert printed.returncode == 0 and printed.stdout == (REPO / "crds" / CRD_FILENAME).read_text()
    stale = subprocess.run([*command, "--check", "--root", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "stale:" in stale.stderr
    subprocess.run([*command, "--write", "--root", str(tmp_path)], check=True, capture_output=True, timeout=60)
    fixed = subprocess.run([*command, "--check", "--root", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert fixed.returncode == 0, fixed.stderr


def _spec_fields(node: dict[str, Any], path: str = "spec"):
    for name, sub in (node.get("properties") or {}).items():
        yield f"{path}.{name}", sub
        yield from _spec_fields(sub, f"{path}.{name}")
        if "items" in sub:
            yield from _spec_fields(sub["items"], f"{path}.{name}[]")
        if isinstance(sub.get("additionalProperties"), dict):
            yield from _spec_fields(sub["additionalProperties"], f"{path}.{name}{{}}")


def test_every_spec_field_is_explained_in_plain_text() -> None:
    """``kubectl explain`` shows each field's description: every one has one, with no reStructuredText."""
    fields = list(_spec_fields(_schema()["properties"]["spec"]))
    assert len(fields) > 150  # the pod fields' core types included
    assert [path for path, node in fields if not node.get("description")] == []
    crd_text = (REPO / "crds" / CRD_FILENAME).read_text()
    assert "``" not in crd_text and ":class:" not in crd_text and ":mod:" not in crd_text


def test_the_model_column_is_the_served_name_and_ttft_has_its_unit() -> None:
    columns = {c["name"]: c for c in PRINTER_COLUMNS}
    assert columns["Model"]["jsonPath"] == ".status.servedName"
    assert "seconds" in columns["TTFT-P95-Seconds"]["description"]
    assert all(c.get("description") for name, c in columns.items() if name != "Age")
