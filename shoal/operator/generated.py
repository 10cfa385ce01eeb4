"""Files in the repository generated from Python: the CRD (in ``crds/`` and the chart's ``crds/``, same bytes),
the chart's fleet-wide alert rules and its Grafana dashboard. ``shoal crd --write`` rewrites them; ``shoal crd --check`` and a test
fail when a committed copy is stale."""

from __future__ import annotations

from pathlib import Path

import yaml

from shoal.engine_kinds import ENGINE_KINDS
from shoal.operator.alerts import alert_rules, gateway_alert_rules, operator_alert_rules
from shoal.operator.crd import CRD_FILENAME, render_crd
from shoal.operator.dashboard import render_dashboard
from shoal.operator.spec import AutoscalingSpec

HEADER = "# Generated from shoal/operator by `shoal crd --write`; do not edit by hand.\n"


def render_chart_alerts() -> str:
    """Alert rules over every engine and gateway Prometheus scrapes, with the spec's default targets: each
    engine kind's rules over its own series (a fleet exports only its kind's, so only those rules can fire for
    it), the gateways' and the operator's."""
    defaults = AutoscalingSpec()
    rules = [
        rule
        for kind in ENGINE_KINDS
        for rule in alert_rules(
            'pod=~".+-engine-.+"',
            defaults.queue_depth_per_replica,
            defaults.ttft_p95_seconds,
            kind=kind,
        )
    ]
    rules += gateway_alert_rules('pod=~".+-gateway-.+"') + operator_alert_rules()
    return HEADER + yaml.safe_dump(rules, sort_keys=False, width=120)


def generated_files(root: Path) -> dict[Path, str]:
    crd = render_crd()
    return {
        root / "crds" / CRD_FILENAME: crd,
        root / "charts" / "shoal" / "crds" / CRD_FILENAME: crd,
        root / "charts" / "shoal" / "files" / "alerts.yaml": render_chart_alerts(),
        root / "charts" / "shoal" / "files" / "dashboard.json": render_dashboard(),
    }


def write_generated(root: Path) -> list[Path]:
    files = generated_files(root)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def stale_files(root: Path) -> list[Path]:
    """Generated files whose committed text differs from what the code generates now."""
    return [path for path, text in generated_files(root).items() if not path.is_file() or path.read_text() != text]
