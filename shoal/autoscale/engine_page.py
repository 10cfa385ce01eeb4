"""One engine's ``/metrics`` page, reduced to what the autoscaler reads (series in ``docs/metrics.md``; other
engines' in ``docs/engines.md``).

The engine kind's :class:`~shoal.engine_kinds.MetricMap` says which family holds each signal; a signal the
engine does not export is ``None`` here, never zero. Read with the shared parser, :mod:`shoal.protocol.prom_text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shoal.engine_kinds import ADAPTERS, MetricMap
from shoal.protocol.prom_text import PromTextError, samples

SHOAL_METRICS = ADAPTERS["shoal"].metrics


class PageError(ValueError):
    """The page is not the engine's metrics (not Prometheus text, or without its queue gauges)."""


@dataclass(frozen=True)
class EnginePage:
    """Gauges as read (``max_num_seqs`` None from an engine that does not export it); counters (``ended``:
    finished plus turned away for a full queue) and the TTFT and inter-token latency buckets cumulative since the
    engine started, for the source to difference between scrapes. ``ended`` and ``generated`` are None from an
    engine without them; a histogram the engine lacks has no buckets."""

    waiting: float
    running: float
    kv_usage: float | None
    ended: float | None
    generated: float | None
    ttft_buckets: dict[float, float]
    max_num_seqs: float | None = None
    itl_buckets: dict[float, float] = field(default_factory=dict)

    @property
    def in_flight(self) -> float:
        return self.waiting + self.running


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _counted(metrics: MetricMap, family: str, labels: dict[str, str]) -> bool:
    """Whether a counter sample is one of the signals: finished or generated, or a rejection of unmet demand."""
    if family in (metrics.finished, metrics.generated):
        return True
    rejected = metrics.rejected
    return rejected is not None and family == rejected[0] and labels.get(rejected[1]) == rejected[2]


def parse_engine_page(text: str, metrics: MetricMap = SHOAL_METRICS) -> EnginePage:
    """The signals ``metrics`` names, summed over label sets (one engine may report per model or per rank)."""
    gauges: dict[str, float] = {}
    counters: dict[str, float] = {}
    histograms: dict[str, dict[float, float]] = {name: {} for name in (metrics.ttft, metrics.itl) if name}
    gauge_names = {metrics.waiting, metrics.running, metrics.kv_usage, metrics.max_num_seqs} - {None}
    try:
        for sample in samples(text):
            if sample.family in gauge_names:
                gauges[sample.family] = gauges.get(sample.family, 0.0) + sample.value
            elif sample.name.endswith("_total") and _counted(metrics, sample.family, sample.labels):
                counters[sample.family] = counters.get(sample.family, 0.0) + sample.value
            elif sample.family in histograms and sample.name.endswith("_bucket"):
                buckets, bound = histograms[sample.family], float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    except PromTextError as error:
        raise PageError(str(error)) from error
    except (ValueError, KeyError) as error:  # a bucket without a number for ``le``
        raise PageError(f"not Prometheus text: {error}") from error
    if metrics.waiting not in gauges or metrics.running not in gauges:
        raise PageError(f"no {metrics.waiting} / {metrics.running} series")
    # a declared counter not on the page yet is zero: labelled counters appear with their first increment
    ended = None
    if metrics.finished is not None:
        ended = counters.get(metrics.finished, 0.0) + (
            counters.get(metrics.rejected[0], 0.0) if metrics.rejected else 0.0
        )
    generated = counters.get(metrics.generated, 0.0) if metrics.generated is not None else None
    values = [gauges[metrics.waiting], gauges[metrics.running], ended or 0.0, generated or 0.0]
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise PageError(f"negative or non-finite values: {values}")
    limit = _finite(gauges.get(metrics.max_num_seqs) if metrics.max_num_seqs else None)
    return EnginePage(
        gauges[metrics.waiting],
        gauges[metrics.running],
        _finite(gauges.get(metrics.kv_usage) if metrics.kv_usage else None),
        ended,
        generated,
        _complete(histograms.get(metrics.ttft or "")),
        limit if limit is not None and limit > 0 else None,
        _complete(histograms.get(metrics.itl or "")),
    )


def _complete(buckets: dict[float, float] | None) -> dict[float, float]:
    """A histogram's buckets, or none when it lacks the ``+Inf`` bucket every quantile needs."""
    return buckets if buckets and math.inf in buckets else {}
