"""What the autoscaler sees of the simulated fleet: a ``FleetSignals`` built as the production sources build it.

Per replica, what a scrape of its ``/metrics`` gives: phase, since when, requests waiting and running, KV usage,
the batch limit (a replica still loading reports nothing, so its values are None). For the fleet, what PromQL over a window
gives: TTFT P95 of the first tokens seen in the window (None when there were none, as ``histogram_quantile``
of an empty histogram is NaN), the arrival rate and the output tokens per second. The quantile is exact here,
where Prometheus interpolates within histogram buckets. An engine kind that exports no series for a signal
(``MetricMap``: llama.cpp has no TTFT histogram, finished-request counter or KV usage) leaves it None, as its
scrape would.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from shoal.autoscale.signals import FleetSignals, ReplicaSignals
from shoal.engine_kinds import MetricMap, adapter
from shoal.simulate.replica import SimReplica


@dataclass(frozen=True)
class WindowReading:
    """What :meth:`SignalWindow.read` gives: the fleet-wide values a PromQL query over the windows would."""

    ttft_p95: float | None
    ttft_p90: float | None
    tpot_p90: float | None
    arrival_rate: float
    tokens_per_second: float


class SignalWindow:
    """Arrivals and output tokens of the last ``rate_s`` seconds, first-token latencies and the time per output
    token of the requests finished in the last ``ttft_s``."""

    __slots__ = (
        "_arrivals",
        "_token_total",
        "_tokens",
        "_tpot_times",
        "_tpots",
        "_ttft_times",
        "_ttfts",
        "rate_s",
        "ttft_s",
    )

    def __init__(self, rate_s: float, ttft_s: float) -> None:
        self.rate_s = rate_s
        self.ttft_s = ttft_s
        self._arrivals: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._token_total = 0  # the sum over ``_tokens``, kept as they come and go (a fleet steps ~10^5 times a window)
        self._ttft_times: deque[float] = deque()
        self._ttfts: deque[float] = deque()  # kept apart from their times, so numpy reads them in one C loop
        self._tpot_times: deque[float] = deque()
        self._tpots: deque[float] = deque()

    def arrived(self, now: float) -> None:
        self._arrivals.append(now)

    def produced(self, now: float, tokens: int) -> None:
        if tokens:
            self._tokens.append((now, tokens))
            self._token_total += tokens

    def first_token(self, now: float, ttft: float) -> None:
        self._ttft_times.append(now)
        self._ttfts.append(ttft)

    def finished(self, now: float, tpot: float) -> None:
        self._tpot_times.append(now)
        self._tpots.append(tpot)

    def read(self, now: float) -> WindowReading:
        """The values over the windows ending at ``now`` (a latency with no sample in its window is None)."""
        horizon = now - self.rate_s
        while self._tokens and self._tokens[0][0] <= horizon:
            self._token_total -= self._tokens.popleft()[1]
        while self._arrivals and self._arrivals[0] <= horizon:
            self._arrivals.popleft()
        while self._ttft_times and self._ttft_times[0] <= now - self.ttft_s:
            self._ttft_times.popleft()
            self._ttfts.popleft()
        while self._tpot_times and self._tpot_times[0] <= now - self.ttft_s:
            self._tpot_times.popleft()
            self._tpots.popleft()
        p95 = p90 = tpot = None
        if self._ttfts:
            ttfts = np.fromiter(self._ttfts, float, len(self._ttfts))
            p95, p90 = (float(v) for v in np.percentile(ttfts, [95, 90]))
        if self._tpots:
            tpot = float(np.percentile(np.fromiter(self._tpots, float, len(self._tpots)), 90))
        return WindowReading(p95, p90, tpot, len(self._arrivals) / self.rate_s, self._token_total / self.rate_s)


SHOAL_METRICS = adapter("shoal").metrics


def replica_signals(replica: SimReplica, metrics: MetricMap = SHOAL_METRICS) -> ReplicaSignals:
    if replica.phase == "starting":
        return ReplicaSignals(replica.name, "starting", replica.since)
    return ReplicaSignals(
        replica.name,
        replica.phase,
        replica.since,
        waiting=float(len(replica.waiting)),
        running=float(replica.running),
        kv_usage=replica.kv_usage if metrics.kv_usage else None,
        max_num_seqs=float(replica.profile.max_num_seqs) if metrics.max_num_seqs else None,
    )


def observe(
    now: float,
    desired: int,
    replicas: Iterable[SimReplica],
    window: SignalWindow,
    held_requests: int,
    metrics: MetricMap = SHOAL_METRICS,
) -> FleetSignals:
    reading = window.read(now)
    return FleetSignals(
        time=now,
        desired=desired,
        replicas=tuple(replica_signals(r, metrics) for r in replicas),
        ttft_p95_seconds=reading.ttft_p95 if metrics.ttft else None,
        ttft_p90_seconds=reading.ttft_p90 if metrics.ttft else None,
        tpot_p90_seconds=reading.tpot_p90 if metrics.ttft else None,  # a latency histogram, as TTFT
        arrival_rate=reading.arrival_rate if metrics.finished else None,  # arrivals are counted as requests that ended
        output_tokens_per_second=reading.tokens_per_second if metrics.generated else None,
        held_requests=held_requests,
    )
