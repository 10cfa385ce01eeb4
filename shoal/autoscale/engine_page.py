"""One engine's ``/metrics`` page, reduced to what the autoscaler reads (series in ``docs/metrics.md``).

Parsed with ``prometheus_client``'s text parser, so exposition details (escaping, ``_total``/``_bucket``
suffixes, label order) are the library's business, not ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

WAITING = "shoal_engine_requests_waiting"
RUNNING = "shoal_engine_requests_running"
KV_USAGE = "shoal_engine_kv_cache_usage_ratio"
MAX_NUM_SEQS = "shoal_engine_max_num_seqs"
FINISHED = "shoal_engine_requests_finished"
REJECTED = "shoal_engine_requests_rejected"
GENERATED = "shoal_engine_generation_tokens"
TTFT = "shoal_engine_time_to_first_token_seconds"
# rejections that are unmet demand; "draining" ones are retried on another replica, "invalid" ones are not load
UNSERVED_REASON = "queue_full"


class PageError(ValueError):
    """The page is not a Shoal engine's metrics (not Prometheus text, or without the queue gauges)."""


@dataclass(frozen=True)
class EnginePage:
    """Gauges as read (``max_num_seqs`` None from an engine that does not export it); counters (``ended``:
    finished plus turned away for a full queue) and TTFT buckets cumulative since the engine started, for the
    source to difference between scrapes."""

    waiting: float
    running: float
    kv_usage: float | None
    ended: float
    generated: float
    ttft_buckets: dict[float, float]
    max_num_seqs: float | None = None

    @property
    def in_flight(self) -> float:
        return self.waiting + self.running


def parse_engine_page(text: str) -> EnginePage:
    gauges: dict[str, float] = {}
    ended = generated = 0.0
    buckets: dict[float, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name in (WAITING, RUNNING, KV_USAGE, MAX_NUM_SEQS):
                    gauges[family.name] = gauges.get(family.name, 0.0) + sample.value
                elif (family.name == FINISHED and sample.name.endswith("_total")) or (
                    family.name == REJECTED
                    and sample.name.endswith("_total")
                    and sample.labels.get("reason") == UNSERVED_REASON
                ):
                    ended += sample.value
                elif family.name == GENERATED and sample.name.endswith("_total"):
                    generated += sample.value
                elif family.name == TTFT and sample.name.endswith("_bucket"):
                    bound = float(sample.labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
    except (ValueError, KeyError, IndexError) as error:
        raise PageError(f"not Prometheus text: {error}") from error
    if WAITING not in gauges or RUNNING not in gauges:
        raise PageError(f"no {WAITING} / {RUNNING} series")
    values = [gauges[WAITING], gauges[RUNNING], ended, generated]
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise PageError(f"negative or non-finite values: {values}")
    kv_usage = gauges.get(KV_USAGE)
    limit = gauges.get(MAX_NUM_SEQS)
    return EnginePage(
        gauges[WAITING],
        gauges[RUNNING],
        kv_usage if kv_usage is not None and math.isfinite(kv_usage) else None,
        ended,
        generated,
        buckets if math.inf in buckets else {},
        limit if limit is not None and math.isfinite(limit) and limit > 0 else None,
    )
