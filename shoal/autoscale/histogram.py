"""Quantiles of cumulative Prometheus histogram buckets, the way ``histogram_quantile`` computes them.

The direct-scrape source sums the bucket increments of every engine between scrapes and asks this for the P95,
so local mode and the operator without Prometheus read the same number Prometheus would give.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def bucket_quantile(quantile: float, buckets: Mapping[float, float]) -> float | None:
    """The ``quantile`` (0..1) of cumulative bucket counts ``{upper bound: count}`` (``+Inf`` included), by linear
    interpolation inside the bucket that holds it; None when the buckets hold no observation.

    As in Prometheus: the lowest bucket interpolates from 0, and a quantile in the ``+Inf`` bucket is the highest
    finite bound (there is nothing to interpolate towards)."""
    bounds = sorted(buckets)
    if not bounds or not math.isinf(bounds[-1]):
        raise ValueError("histogram buckets must include the +Inf bucket")
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = quantile * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds[:-1]:
        count = buckets[bound]
        if count >= rank:
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound  # in the +Inf bucket: the highest finite bound
