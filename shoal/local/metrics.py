"""Reading a local server's ``/metrics`` page: what tests, benchmarks and ``shoal up`` check a server by."""

from __future__ import annotations

import httpx


def metric_values(url: str, name: str) -> dict[str, float]:
    """Samples of one metric on ``url``'s ``/metrics``: the label text (``{...}``, or empty) -> value."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            values[key[len(name):]] = float(value)
    return values


def metric(url: str, name: str) -> float:
    """The sum of a metric's samples (most have one, labelled with the model)."""
    return sum(metric_values(url, name).values())
