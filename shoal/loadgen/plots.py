"""``shoal bench serve --plots DIR``: PNG plots of a run.

Always the latency CDFs (TTFT and end-to-end, from the client's own timings). When the target is a ``shoal up``
gateway, its fleet timeline (``/dashboard/data``: replicas, queue depth, TTFT P95 each second, the last ten
minutes) is read once after the run, and the stretch the run covered is plotted too: that is the scale-up a
burst caused, seen from the fleet's side. Any other server has no timeline, and only the CDFs are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from shoal.loadgen.client import RequestResult

MARGIN_S = 5.0  # timeline kept before the first request and after the last


def fetch_timeline(url: str, start: float, end: float) -> list[dict[str, Any]] | None:
    """The fleet samples from ``start - MARGIN_S`` to ``end + MARGIN_S`` (wall clock), or None without a timeline."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/dashboard/data", timeout=10)
        samples = response.json()["samples"] if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(samples, list):
        return None
    return [s for s in samples if start - MARGIN_S <= s.get("t", 0) <= end + MARGIN_S]


def _series(timeline: list[dict[str, Any]], key: str) -> list[float]:
    """One column of the timeline, a gap (NaN) where the fleet had no value."""
    return [float("nan") if s.get(key) is None else float(s[key]) for s in timeline]


def _cdf(axes: Any, values: Sequence[float], label: str) -> None:
    ordered = sorted(values)
    if ordered:
        axes.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)


def write_plots(
    directory: Path, results: Sequence[RequestResult], timeline: list[dict[str, Any]] | None, start: float
) -> list[Path]:
    """Writes the PNGs into ``directory`` (created if needed) and returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    done = [r for r in results if r.success]
    written = []
    figure, axes = plt.subplots(figsize=(7, 4))
    _cdf(axes, [r.ttft for r in done], "time to first token")
    _cdf(axes, [r.e2e for r in done], "end to end")
    axes.set(xlabel="seconds", ylabel="fraction of requests", title=f"Latency CDF ({len(done)} requests)")
    axes.grid(alpha=0.3)
    axes.legend()
    written.append(directory / "latency_cdf.png")
    figure.savefig(written[-1], dpi=110, bbox_inches="tight")
    plt.close(figure)
    if timeline:
        t = [s["t"] - start for s in timeline]
        figure, (replicas, queue, ttft) = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
        for key in ("ready", "starting", "draining", "desired"):
            replicas.step(t, _series(timeline, key), where="post", label=key)
        replicas.set(ylabel="replicas", title="The fleet during the run (0 = first request)")
        queue.plot(t, _series(timeline, "waiting"), label="waiting (queue depth)")
        queue.plot(t, _series(timeline, "running"), label="running")
        queue.set(ylabel="requests")
        ttft.plot(t, _series(timeline, "ttft_p95"), label="fleet TTFT P95")
        ttft.set(ylabel="seconds", xlabel="seconds since the first request")
        for axes in (replicas, queue, ttft):
            axes.grid(alpha=0.3)
            axes.legend(loc="upper right")
        written.append(directory / "fleet_over_time.png")
        figure.savefig(written[-1], dpi=110, bbox_inches="tight")
        plt.close(figure)
    return written
