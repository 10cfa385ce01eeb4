"""Reading a server's ``/metrics`` page over HTTP: what tests, benchmarks and ``shoal up`` check a server by.

The page is read by the shared parser, :mod:`shoal.protocol.prom_text`.
"""

from __future__ import annotations

import httpx

from shoal.protocol.prom_text import samples_named


def _label_text(labels: dict[str, str]) -> str:
    """Labels as the exposition format writes them: ``{model="x",reason="y"}``, or empty."""
    if not labels:
        return ""
    escaped = (value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for value in labels.values())
    return "{" + ",".join(f'{key}="{value}"' for key, value in zip(labels, escaped, strict=True)) + "}"


def metric_values(url: str, name: str) -> dict[str, float]:
    """Samples of one metric on ``url``'s ``/metrics``: the label text (``{...}``, or empty) -> value."""
    page = httpx.get(f"{url}/metrics", timeout=10).text
    return {_label_text(labels): value for labels, value in samples_named(page, name)}


def metric(url: str, name: str) -> float:
    """The sum of a metric's samples (most have one, labelled with the model)."""
    return sum(metric_values(url, name).values())
