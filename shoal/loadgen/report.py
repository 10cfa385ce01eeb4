"""Turns per-request results into the benchmark's figures: throughput, latency percentiles, goodput.

Goodput (DistServe's term, as ``vllm bench serve`` reports it) is the rate of requests that met every given
SLO: a fast server that misses its latency targets does not get credit for its throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean

import numpy as np

from shoal.loadgen.client import RequestResult

SLO_METRICS = ("ttft", "tpot", "e2el")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, as ``vllm bench serve`` reports); 0 if empty."""
    return float(np.percentile(values, q)) if len(values) else 0.0


def _distribution(values: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    """Milliseconds: mean and the asked percentiles."""
    stats = {"mean_ms": mean(values) * 1000 if values else 0.0}
    for q in percentiles:
        stats[f"p{q:g}_ms"] = percentile(values, q) * 1000
    return stats


def meets_slos(result: RequestResult, slos_ms: dict[str, float]) -> bool:
    measured = {"ttft": result.ttft, "tpot": result.tpot or 0.0, "e2el": result.e2e}
    return result.success and all(measured[name] * 1000 <= limit for name, limit in slos_ms.items())


def summarize(
    results: Sequence[RequestResult],
    duration_s: float,
    percentiles: Sequence[float] = (50, 95, 99),
    slos_ms: dict[str, float] | None = None,
) -> dict[str, object]:
    ok = [r for r in results if r.success]
    output_tokens = sum(r.output_tokens for r in ok)
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    summary: dict[str, object] = {
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "retried": sum(r.retries for r in results),
        "duration_s": duration_s,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "request_throughput_rps": len(ok) / duration_s if duration_s else 0.0,
        "output_throughput_tok_s": output_tokens / duration_s if duration_s else 0.0,
        "total_throughput_tok_s": (prompt_tokens + output_tokens) / duration_s if duration_s else 0.0,
        "ttft": _distribution([r.ttft for r in ok], percentiles),
        "tpot": _distribution([t for r in ok if (t := r.tpot) is not None], percentiles),
        "itl": _distribution([gap for r in ok for gap in r.itls], percentiles),
        "e2el": _distribution([r.e2e for r in ok], percentiles),
        "errors": sorted({r.error for r in results if not r.success})[:5],
    }
    if slos_ms:
        good = sum(1 for r in ok if meets_slos(r, slos_ms))
        summary["slos_ms"] = dict(slos_ms)
        summary["goodput_rps"] = good / duration_s if duration_s else 0.0
    return summary


def format_summary(summary: dict[str, object]) -> str:
    """A plain-text table for the terminal."""
    lines = [
        f"{'completed / failed':<32}{summary['completed']} / {summary['failed']}"
        + (f" ({summary['retried']} sent again on a new connection)" if summary.get("retried") else ""),
        f"{'duration (s)':<32}{summary['duration_s']:.2f}",
        f"{'request throughput (req/s)':<32}{summary['request_throughput_rps']:.2f}",
        f"{'output throughput (tok/s)':<32}{summary['output_throughput_tok_s']:.1f}",
        f"{'total throughput (tok/s)':<32}{summary['total_throughput_tok_s']:.1f}",
    ]
    if "goodput_rps" in summary:
        lines.append(f"{'goodput (req/s)':<32}{summary['goodput_rps']:.2f}")
    for name in ("ttft", "tpot", "itl", "e2el"):
        stats = summary[name]
        assert isinstance(stats, dict)
        lines.append(f"{name.upper() + ' (ms)':<32}" + "  ".join(f"{k[:-3]} {v:.1f}" for k, v in stats.items()))
    errors = summary.get("errors") or []
    assert isinstance(errors, list)
    lines += [f"error: {error}" for error in errors]
    return "\n".join(lines)
