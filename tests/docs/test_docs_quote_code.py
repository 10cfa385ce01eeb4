"""What the docs quote from the code (defaults, tile sizes, rule names) is what the code says.

Each quote is found in its page by a pattern and compared with the value the code holds, so a change to either
side fails here until the other follows. The operator's spec table is read whole: every default it gives as a
number, a boolean or a literal is checked against the typed model's default for that field.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic import BaseModel

from shoal.autoscale.config import AutoscalingConfig
from shoal.operator.spec import InferenceDeploymentSpec

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def module_constants(path: str) -> dict[str, Any]:
    """A module's top-level ``NAME = literal`` assignments, read without importing it (Triton modules need not
    import here)."""
    tree = ast.parse((REPO / path).read_text())
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value.value
    return constants


def kernel_bench_repeats() -> float:
    """``bench/kernel_timing.py --repeats``'s default, and that its timer takes the median of them."""
    source = (REPO / "bench" / "kernel_timing.py").read_text()
    assert "return sorted(samples)[len(samples) // 2]" in source, "bench/kernel_timing.py no longer times the median"
    found = re.search(r'"--repeats", type=int, default=(\d+)', source)
    assert found
    return float(found.group(1))


def config_default(name: str) -> float:
    return float(next(f.default for f in fields(AutoscalingConfig) if f.name == name))  # type: ignore[arg-type]


DECODE = "shoal/kernels/triton/decode_attention.py"
PREFILL = "shoal/kernels/triton/prefill_attention.py"
GROUPED = "shoal/kernels/triton/grouped_matmul.py"
LORA = "shoal/kernels/triton/lora.py"
POLICY = "shoal/autoscale/shoal_policy.py"

# (page, pattern whose group 1 is the quoted number, the code's value)
QUOTES: list[tuple[str, str, Callable[[], float]]] = [
    ("kernels.md", r"KV loop walks `BLOCK_N = (\d+)` positions", lambda: module_constants(DECODE)["BLOCK_N"]),
    ("kernels.md", r"\*\*Tile size\.\*\* `BLOCK_N = (\d+)`", lambda: module_constants(DECODE)["BLOCK_N"]),
    (
        "kernels.md",
        r"\*\*Tile size\.\*\* `BLOCK_N = \d+` with (\d+) warps",
        lambda: module_constants(DECODE)["NUM_WARPS"],
    ),
    ("kernels.md", r"make the `BLOCK_M = (\d+)` rows", lambda: module_constants(PREFILL)["BLOCK_M"]),
    ("kernels.md", r"with `BLOCK_M = BLOCK_N = (\d+)`", lambda: module_constants(PREFILL)["BLOCK_N"]),
    ("kernels.md", r"cuts every run into (\d+)-row tiles", lambda: module_constants(GROUPED)["BLOCK_M"]),
    ("kernels.md", r"times a (\d+)-column slice", lambda: module_constants(GROUPED)["BLOCK_N"]),
    ("kernels.md", r"`K` in steps of (\d+)", lambda: module_constants(GROUPED)["BLOCK_K"]),
    ("kernels.md", r"in tiles of\s+`BLOCK_M = (\d+)` tokens", lambda: module_constants(LORA)["BLOCK_M"]),
    ("kernels.md", r"on tensor cores \(`K` in steps of (\d+); the expand", lambda: module_constants(LORA)["BLOCK_K"]),
    ("kernels.md", r"`MAX_SPLIT_K = (\d+)` chunks", lambda: module_constants(LORA)["MAX_SPLIT_K"]),
    ("benchmarks.md", r"every figure the median\s+of (\d+) timed calls", kernel_bench_repeats),
    ("autoscaling.md", r"`queueDepthPerReplica: (\d+)`", lambda: config_default("queue_depth_per_replica")),
    ("autoscaling.md", r"`ttftP95Seconds: (\d+)`", lambda: config_default("ttft_p95_seconds")),
    ("autoscaling.md", r"tolerance ([\d.]+) \(HPA's\)", lambda: config_default("tolerance")),
    ("autoscaling.md", r"panic window (\d+) s", lambda: module_constants(POLICY)["_PANIC_SECONDS"]),
    ("autoscaling.md", r"scale-down window (\d+) s", lambda: config_default("scale_down_stabilization_seconds")),
    ("autoscaling.md", r"`maxStep: (\d+)` \(the CRD's\)", lambda: config_default("max_step")),
    ("autoscaling.md", r"`target_utilization` ([\d.]+) of", lambda: config_default("target_utilization")),
    ("autoscaling.md", r"burst memory (\d+) min", lambda: config_default("burst_memory_seconds") / 60),
    ("autoscaling.md", r"`startup_timeout_seconds` (\d+)", lambda: config_default("startup_timeout_seconds")),
    ("autoscaling.md", r"their median, at least (\d+) s", lambda: module_constants(POLICY)["_BACKLOG_DRAIN_SECONDS"]),
]


@pytest.mark.parametrize(("page", "pattern", "value"), QUOTES, ids=[f"{p}: {r[:40]}" for p, r, _ in QUOTES])
def test_a_quoted_number_is_the_codes(page: str, pattern: str, value: Callable[[], float]) -> None:
    found = re.search(pattern, (DOCS / page).read_text())
    assert found, f"docs/{page} no longer says /{pattern}/: update the quote or this check"
    assert float(found.group(1)) == pytest.approx(float(value())), f"docs/{page}: {found.group(0)}"


def rule_names(path: str) -> set[str]:
    """The rule names a module can decide (string literals shaped like ``ScaleUpQueue`` / ``HoldSteady``)."""
    tree = ast.parse((REPO / path).read_text())
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"(Scale|Hold)[A-Z]\w+", node.value)
    }


def test_the_rule_table_names_every_rule_and_no_other() -> None:
    text = (DOCS / "autoscaling.md").read_text()
    table = [line for line in text.splitlines() if line.startswith(("| `Scale", "| `Hold"))]
    documented = {name for line in table for name in re.findall(r"`((?:Scale|Hold)\w+)`", line.split("|")[1])}
    decided = rule_names(POLICY) | rule_names("shoal/operator/autoscaler.py")
    assert decided - documented == set(), "rules the code decides that docs/autoscaling.md's table lacks"
    assert documented - decided == set(), "rules docs/autoscaling.md's table names that the code never decides"


def spec_default(path: str) -> Any:
    """The typed model's default for a camelCase field path such as ``gateway.timeouts.connectSeconds``: read from
    the parent's default object where it has one (``gateway.resources`` defaults to requests and limits of its
    own), else from the field's type."""
    model: type[BaseModel] = InferenceDeploymentSpec
    value: Any = None
    *parents, leaf = path.split(".")
    for name in parents:
        field = next(f for f in model.model_fields.values() if f.alias == name)
        value = field.get_default(call_default_factory=True)
        model = next(
            t
            for t in (field.annotation, *get_args(field.annotation))
            if isinstance(t, type) and issubclass(t, BaseModel)
        )
    field_name, field = next((n, f) for n, f in model.model_fields.items() if f.alias == leaf)
    if isinstance(value, BaseModel):
        return getattr(value, field_name)
    return field.get_default(call_default_factory=True)


def literal(cell: str) -> tuple[bool, Any]:
    """A default cell's value when it is one the model can hold as is: a number, a boolean or a `literal`."""
    cell = cell.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", cell):
        return True, float(cell)
    if cell in ("true", "false"):
        return True, cell == "true"
    quoted = re.fullmatch(r"`([^`]+)`", cell)
    if quoted and quoted.group(1).startswith(("{", "[")):
        return True, yaml.safe_load(quoted.group(1))  # a mapping or list, as YAML writes it
    return (True, quoted.group(1)) if quoted else (False, None)


def test_the_operator_spec_tables_defaults_are_the_models() -> None:
    """Rows list one full path then siblings (``a.b`, `c``, or ``a.b` / `c``), and their defaults in the same
    order; a row whose counts differ, or a default in words ("the source", a dash), is not a quote of a value."""
    rows = [line for line in (DOCS / "operator.md").read_text().splitlines() if re.match(r"\| `[a-z]+\.", line)]
    checked = 0
    for row in rows:
        names_cell, default_cell = row.split("|")[1:3]
        separator = " / " if " / " in names_cell else ", "
        names = [n.strip().strip("`") for n in names_cell.split(separator)]
        defaults = default_cell.split(separator)
        if len(names) != len(defaults) or not all(re.fullmatch(r"[\w.]+", n) for n in names):
            continue
        prefix = names[0].rpartition(".")[0]
        for name, cell in zip(names, defaults, strict=True):
            path = name if "." in name else f"{prefix}.{name}"
            known, value = literal(cell)
            if not known:
                continue
            code = spec_default(path)
            if isinstance(value, float) and not isinstance(code, bool):
                assert code is not None and float(code) == pytest.approx(value), (
                    f"{path}: docs {cell.strip()}, code {code}"
                )
            else:
                assert code == value, f"{path}: docs {cell.strip()}, code {code!r}"
            checked += 1
    assert checked >= 15, f"only {checked} defaults read from docs/operator.md's spec table: has its shape changed?"


def test_every_current_figure_says_where_it_came_from() -> None:
    """docs/benchmarks.md: each table row has a command, a commit this repository holds, a date and a machine."""
    import subprocess

    rows = [r for r in (DOCS / "benchmarks.md").read_text().splitlines() if r.startswith("| ") and "---" not in r]
    figures = [r for r in rows if not r.startswith(("| figure |", "| trace |"))]
    assert len(figures) >= 30
    for row in figures:
        cells = [c.strip() for c in row.strip("|").split("|")]
        column = [c for c in cells if re.fullmatch(r"[0-9a-f]{7}†?(, [0-9a-f]{7}†?)*", c)]
        assert len(column) == 1, f"no commit column in: {row}"
        commits = re.findall(r"[0-9a-f]{7}", column[0])
        assert re.search(r"20\d\d-\d\d-\d\d", row), f"no date in: {row}"
        for commit in commits:
            known = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "-q", f"{commit}^{{commit}}"])
            assert known.returncode == 0, f"{commit} is not a commit of this repository: {row}"
