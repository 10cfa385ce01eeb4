"""PNG plots of a comparison: the trace's arrival rate, each policy's ready replicas and TTFT P95 over time, and
the TTFT distribution of each policy. matplotlib (the ``simulate`` extra) is imported only here."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shoal.simulate.compare import Comparison
from shoal.simulate.results import WINDOW_S, window_ttft_p95


def write_plots(comparison: Comparison, directory: str | Path, prefix: str = "") -> list[Path]:
    """Writes ``<prefix>timeline.png`` and ``<prefix>ttft_cdf.png`` into ``directory``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    trace, slo = comparison.trace, comparison.slo_ttft_p95_s
    title = f"{trace.name} on {comparison.profile.name}"

    fig, (rate_ax, replicas_ax, ttft_ax) = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    minutes = np.bincount((trace.arrival // WINDOW_S).astype(np.int64)) / WINDOW_S
    rate_ax.step(np.arange(len(minutes)), minutes, where="post", color="black")
    rate_ax.set_ylabel("arrivals (req/s)")
    rate_ax.set_title(title)
    for name, run in comparison.runs.items():
        timeline = run.timeline
        replicas_ax.step(timeline[:, 0] / 60, timeline[:, 2], where="post", label=name)
        starts, p95s = window_ttft_p95(run)
        ttft_ax.step(starts / 60, np.minimum(p95s, 1e4), where="post", label=name)
    for burst in trace.bursts:
        for ax in (rate_ax, replicas_ax, ttft_ax):
            ax.axvline(burst / 60, color="grey", linestyle=":", linewidth=0.8)
    replicas_ax.set_ylabel("ready replicas")
    replicas_ax.legend(loc="upper left", ncol=len(comparison.runs))
    ttft_ax.axhline(slo, color="red", linestyle="--", linewidth=1, label="SLO")
    ttft_ax.set_yscale("log")
    ttft_ax.set_ylabel("TTFT P95 per minute (s)")
    ttft_ax.set_xlabel("minutes")
    fig.tight_layout()
    timeline_path = out / f"{prefix}timeline.png"
    fig.savefig(timeline_path, dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in comparison.runs.items():
        ttft = np.sort((run.first_token - run.arrival)[~np.isnan(run.first_token)])
        if len(ttft):
            ax.plot(ttft, np.arange(1, len(ttft) + 1) / len(ttft), label=name)
    ax.axvline(slo, color="red", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"TTFT distribution, {title}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    cdf_path = out / f"{prefix}ttft_cdf.png"
    fig.savefig(cdf_path, dpi=90)
    plt.close(fig)
    return [timeline_path, cdf_path]
