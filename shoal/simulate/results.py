"""The figures of one simulated run, as the comparison table and ``--json`` report them.

- ``slo_attainment``: the fraction of 1-minute windows (by arrival time, windows with at least one arrival) whose
  TTFT P95 meets the target. A request that never got a first token counts as an infinite TTFT in its window,
  so a policy cannot pass a window by leaving requests unserved.
- ``ttft_*_s``, ``itl_*_s``: percentiles over served requests; ITL is each request's mean time per output token
  after the first (the simulator advances decode steps in aggregate, so it has no per-token gaps).
- ``replica_hours``: every replica from creation (start-up counts: the GPU is held while the model loads) to its
  end (drained, or the end of the run).
- ``scale_events``: decisions that changed the replica count; ``max_reversals_per_10min``: the most changes of
  direction (up then down, or down then up) within any 10 minutes.
- ``burst_decision_s`` / ``burst_ready_s``: for each burst the trace marks, seconds from its start to the first
  decision reaching 90% of the largest count asked for in the next 10 minutes, and to that many replicas ready.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import numpy as np

from shoal.simulate.simulator import SimRun

WINDOW_S = 60.0
REVERSAL_WINDOW_S = 600.0
BURST_HORIZON_S = 600.0


def _percentiles(values: np.ndarray, prefix: str) -> dict[str, float | None]:
    if not len(values):
        return {f"{prefix}_p{q}_s": None for q in (50, 95, 99)}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {f"{prefix}_p50_s": float(p50), f"{prefix}_p95_s": float(p95), f"{prefix}_p99_s": float(p99)}


def window_ttft_p95(run: SimRun, window_s: float = WINDOW_S) -> tuple[np.ndarray, np.ndarray]:
    """(window start times, TTFT P95 per window by arrival, inf where a request was never served)."""
    ttft = np.where(np.isnan(run.first_token), np.inf, run.first_token - run.arrival)
    windows = (run.arrival // window_s).astype(np.int64)
    if not len(windows):
        return np.zeros(0), np.zeros(0)
    order = np.argsort(windows, kind="stable")
    bounds = np.flatnonzero(np.diff(windows[order])) + 1
    starts, p95s = [], []
    for chunk in np.split(order, bounds):
        starts.append(windows[chunk[0]] * window_s)
        p95s.append(np.percentile(ttft[chunk], 95, method="higher"))
    return np.asarray(starts, dtype=float), np.asarray(p95s, dtype=float)


def _reversals(run: SimRun) -> int:
    changes: list[tuple[float, int]] = []
    previous = None
    for decision in run.decisions:
        if previous is not None and decision.replicas != previous:
            changes.append((decision.time, 1 if decision.replicas > previous else -1))
        previous = decision.replicas
    flip_times = [later[0] for earlier, later in pairwise(changes) if earlier[1] != later[1]]
    most, start = 0, 0
    for end, time in enumerate(flip_times):
        while flip_times[start] <= time - REVERSAL_WINDOW_S:
            start += 1
        most = max(most, end - start + 1)
    return most


def _burst_response(run: SimRun, bursts: tuple[float, ...]) -> tuple[list[float | None], list[float | None]]:
    decided: list[float | None] = []
    ready: list[float | None] = []
    times = np.asarray([d.time for d in run.decisions])
    counts = np.asarray([d.replicas for d in run.decisions])
    for burst in bursts:
        inside = (times >= burst) & (times <= burst + BURST_HORIZON_S)
        if not inside.any():
            decided.append(None)
            ready.append(None)
            continue
        final = int(counts[inside].max())
        reach = np.flatnonzero(inside & (counts >= 0.9 * final))
        decided.append(float(times[reach[0]] - burst) if len(reach) else None)
        timeline = run.timeline
        up = np.flatnonzero((timeline[:, 0] >= burst) & (timeline[:, 2] >= final))
        ready.append(float(timeline[up[0], 0] - burst) if len(up) else None)
    return decided, ready


def summarize_run(run: SimRun, slo_ttft_p95_s: float, bursts: tuple[float, ...] = ()) -> dict[str, object]:
    """The figures of one run (see the module docstring)."""
    served = ~np.isnan(run.finish)
    has_first = ~np.isnan(run.first_token)
    ttft = (run.first_token - run.arrival)[has_first]
    decoded = served & (run.output_tokens > 1)
    itl = (run.finish - run.first_token)[decoded] / (run.output_tokens[decoded] - 1)
    _, p95s = window_ttft_p95(run)
    scale_events = sum(1 for a, b in pairwise(run.decisions) if a.replicas != b.replicas)
    decided, ready = _burst_response(run, bursts)
    requests = run.per_replica_requests
    summary: dict[str, object] = {
        "slo_attainment": float((p95s <= slo_ttft_p95_s).mean()) if len(p95s) else None,
        "replica_hours": sum(end - start for start, end in run.replica_spans) / 3600.0,
        "standby_hours": sum(end - start for start, end in run.standby_spans) / 3600.0,
        **_percentiles(ttft, "ttft"),
        **_percentiles(itl, "itl"),
        "scale_events": scale_events,
        "max_reversals_per_10min": _reversals(run),
        "burst_decision_s": decided,
        "burst_ready_s": ready,
        "peak_replicas": int(run.timeline[:, 1].max()) if len(run.timeline) else 0,
        "requests": {
            "arrived": len(run.arrival),
            "served": int(served.sum()),
            "dropped": dict(Counter(run.dropped.values())),
            "in_flight": run.in_flight,
        },
        "prefix_hit_rate": run.prefill_tokens_saved / run.prompt_tokens_total if run.prompt_tokens_total else 0.0,
        "routing": {
            "policy": run.routing,
            "reasons": dict(run.route_reasons),
            "max_over_mean_requests": max(requests) / (sum(requests) / len(requests)) if requests else None,
        },
        "simulated_s": run.end_time,
    }
    return summary
