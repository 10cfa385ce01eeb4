"""Writes the values table of charts/shoal/README.md from charts/shoal/values.yaml, as helm-docs would.

The descriptions are helm-docs' own convention: a `# -- text` comment (continued by the `# ` lines after it) just
above a key. The table is the one helm-docs' default template renders (key, type, default as compact JSON,
description; sorted by key), so helm-docs and this script agree; this one needs no Go toolchain, and
tests/operator/test_chart_readme.py runs it to fail on a stale README. Everything outside the markers is
written by hand.

    python hack/chart_readme.py --write    # rewrite the table in place
    python hack/chart_readme.py --check    # exit 1 when the README's table is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "shoal"
BEGIN = "<!-- values table: written by hack/chart_readme.py from values.yaml's `# --` comments; do not edit -->"
END = "<!-- end of values table -->"
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.-]+):(\s|$)")
_DOC = re.compile(r"^\s*# -- ?(.*)$")
_MORE = re.compile(r"^\s*# ?(.*)$")


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    description: str

    def line(self) -> str:
        return f"| {self.key} | {self.type} | `{self.default}` | {self.description} |"


def descriptions(text: str) -> dict[str, str]:
    """Each documented key's dotted path and its `# --` text, read line by line (block mappings only)."""
    found: dict[str, str] = {}
    parents: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        if (doc := _DOC.match(line)) is not None:
            pending = [doc.group(1)]
        elif pending is not None and (more := _MORE.match(line)) is not None:
            pending.append(more.group(1))
        elif (key := _KEY.match(line)) is not None:
            indent = len(key.group(1))
            parents = [(i, k) for i, k in parents if i < indent]
            path = ".".join([k for _, k in parents] + [key.group(2)])
            parents.append((indent, key.group(2)))
            if pending is not None:
                found[path] = " ".join(part.strip() for part in pending).strip()
            pending = None
        elif not line.strip().startswith("#"):
            pending = None
    return found


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "string"


def _json(value: Any) -> str:
    """Compact JSON with sorted keys and Go's HTML escapes, as helm-docs prints a default."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def rows(values: dict[str, Any], docs: dict[str, str]) -> list[Row]:
    """A row per documented key, and per leaf no documented ancestor covers (helm-docs' rule)."""
    out: list[Row] = []

    def walk(node: dict[str, Any], prefix: str, covered: bool) -> None:
        for name, value in node.items():
            path = f"{prefix}{name}"
            leaf = not isinstance(value, dict) or not value
            if path in docs or (leaf and not covered):
                out.append(Row(path, _type(value), _json(value), docs.get(path, "")))
            if not leaf:
                walk(value, f"{path}.", covered or path in docs)

    walk(values, "", False)
    return sorted(out, key=lambda r: r.key)


def table(chart: Path = CHART) -> str:
    text = (chart / "values.yaml").read_text()
    lines = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    lines += [r.line() for r in rows(yaml.safe_load(text), descriptions(text))]
    return "\n".join(lines)


def undocumented(chart: Path = CHART) -> list[str]:
    """The keys the table lists without a description."""
    text = (chart / "values.yaml").read_text()
    return [r.key for r in rows(yaml.safe_load(text), descriptions(text)) if not r.description]


def rendered(readme: str, chart: Path = CHART) -> str:
    """The README with the table between its markers rewritten."""
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"README.md lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{table(chart)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    path = CHART / "README.md"
    current = path.read_text()
    wanted = rendered(current)
    if args.check:
        if wanted != current:
            print(f"{path} is stale: run python hack/chart_readme.py --write", file=sys.stderr)
            return 1
        return 0
    path.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
