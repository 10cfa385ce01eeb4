"""Reading a server's ``/metrics`` page: what tests, benchmarks and ``shoal up`` check a server by.

Parsed with ``prometheus_client``'s text parser, so exposition details (escaping, ``_total`` suffixes, label
order) are the library's business; ``samples_named`` is the one reader both the HTTP helpers here and
``shoal up``'s figures use.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def samples_named(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample called ``name`` (``_total``/``_bucket`` included) on a Prometheus text page, with its labels."""
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


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
