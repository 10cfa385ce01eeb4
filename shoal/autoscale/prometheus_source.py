"""The Prometheus source: the engines' series through Prometheus's HTTP API, one PromQL query per signal.

``selector`` holds the label matchers that pick one fleet's engines (the operator's PrometheusRule uses
``namespace="ns",pod=~"name-engine-.*"``); ``replica_label`` is the label naming the replica (``pod``). Queries
run concurrently, each an instant query over a ``window`` (``1m``: at least four scrapes at the PodMonitor's
15 s):

- per replica: ``sum by (pod) (shoal_engine_requests_waiting{...})``, running, KV usage, the batch limit
  (``shoal_engine_max_num_seqs``), and the age of the
  queue sample, ``time() - timestamp(...)``, measured on Prometheus's clock, so skew between the operator's clock
  and Prometheus's does not make fresh data look stale (or stale data fresh);
- TTFT P95: ``histogram_quantile(0.95, sum by (le) (rate(shoal_engine_time_to_first_token_seconds_bucket[1m])))``;
- arrival rate: ended requests (finished, or turned away for a full queue) per second plus the growth of those
  in flight (``deriv`` of the waiting and running gauges), so a saturated fleet shows its demand, not its
  throughput; output tokens/s from the generated-tokens counter.

Prometheus down, slow (past ``timeout_seconds``), answering an error or something that is not its JSON, or
holding no fresh queue sample for any ready replica: the observation is ``missing`` with the reason. A replica
whose series is absent, stale (older than ``stale_seconds``) or NaN has None values (the policy then never
scales down). A NaN or empty TTFT quantile (no first token in the window) is None, not zero.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import httpx

from shoal.autoscale.engine_page import SHOAL_METRICS
from shoal.autoscale.signals import FleetSignals, ReplicaSignals
from shoal.autoscale.source import ReplicaTarget
from shoal.engine_kinds import MetricMap


def queries(metrics: MetricMap, sel: str, by: str, w: str) -> dict[str, str]:
    """One PromQL query per signal the engine kind exports (a signal it lacks has no query, so stays None)."""
    q = {
        "waiting": f"sum by ({by}) ({metrics.waiting}{{{sel}}})",
        "running": f"sum by ({by}) ({metrics.running}{{{sel}}})",
        "age": f"max by ({by}) (time() - timestamp({metrics.waiting}{{{sel}}}))",
        "growth": f"sum(deriv({metrics.waiting}{{{sel}}}[{w}])) + sum(deriv({metrics.running}{{{sel}}}[{w}]))",
    }
    if metrics.kv_usage is not None:
        q["kv_usage"] = f"max by ({by}) ({metrics.kv_usage}{{{sel}}})"
    if metrics.max_num_seqs is not None:
        q["max_num_seqs"] = f"max by ({by}) ({metrics.max_num_seqs}{{{sel}}})"
    if metrics.ttft is not None:
        q["ttft"] = f"histogram_quantile(0.95, sum by (le) (rate({metrics.ttft}_bucket{{{sel}}}[{w}])))"
    if metrics.itl is not None:
        q["tpot"] = f"histogram_quantile(0.90, sum by (le) (rate({metrics.itl}_bucket{{{sel}}}[{w}])))"
    if metrics.finished is not None:
        q["finished"] = f"sum(rate({metrics.finished}_total{{{sel}}}[{w}]))"
    if metrics.rejected is not None:
        counter, label, value = metrics.rejected
        q["unserved"] = f'sum(rate({counter}_total{{{sel},{label}="{value}"}}[{w}]))'
    if metrics.generated is not None:
        q["generated"] = f"sum(rate({metrics.generated}_total{{{sel}}}[{w}]))"
    return q


class PrometheusUnavailable(Exception):
    """Why Prometheus gave no usable answer."""


class PrometheusSource:
    """A :class:`~shoal.autoscale.source.MetricsSource` querying Prometheus's HTTP API."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        selector: str,
        replica_label: str = "pod",
        window: str = "1m",
        timeout_seconds: float = 2.0,
        stale_seconds: float = 60.0,
        metrics: MetricMap = SHOAL_METRICS,
    ) -> None:
        self.client = client
        self.url = url.rstrip("/")
        self.replica_label = replica_label
        self.timeout_seconds = timeout_seconds
        self.stale_seconds = stale_seconds
        self.metrics = metrics
        self.queries = queries(metrics, selector, replica_label, window)

    async def observe(self, now: float, desired: int, replicas: Sequence[ReplicaTarget]) -> FleetSignals:
        try:
            answers = await asyncio.wait_for(self._query_all(), self.timeout_seconds)
        except TimeoutError:
            return self._missing(now, desired, replicas, f"Prometheus timed out after {self.timeout_seconds:g}s")
        except PrometheusUnavailable as error:
            return self._missing(now, desired, replicas, str(error))
        fresh = {name for name, age in answers["age"].items() if age <= self.stale_seconds}
        per_replica = tuple(self._replica(r, answers, r.name in fresh) for r in replicas)
        ready = [r for r in per_replica if r.phase == "ready"]
        if ready and all(r.waiting is None for r in ready):
            ages = answers["age"].values()
            why = f"the newest is {min(ages):.0f}s old" if ages else "no series"
            return self._missing(
                now,
                desired,
                replicas,
                f"Prometheus has no fresh {self.metrics.waiting} sample for any ready replica ({why})",
            )
        arrival = None
        if "finished" in answers:
            parts = ("finished", "unserved", "growth")
            total = sum(answers[k].get("", 0.0) for k in parts if k in answers)
            arrival = max(total, 0.0) if math.isfinite(total) else None
        ttft = answers["ttft"].get("") if "ttft" in answers else None
        tpot = answers["tpot"].get("") if "tpot" in answers else None
        generated = answers["generated"].get("", 0.0) if "generated" in answers else None
        return FleetSignals(
            time=now,
            desired=desired,
            replicas=per_replica,
            ttft_p95_seconds=ttft,
            tpot_p90_seconds=tpot,
            arrival_rate=arrival,
            output_tokens_per_second=generated,
        )

    async def _query_all(self) -> dict[str, dict[str, float]]:
        keys = list(self.queries)
        results = await asyncio.gather(*(self._query(self.queries[k]) for k in keys))
        return dict(zip(keys, results, strict=True))

    async def _query(self, promql: str) -> dict[str, float]:
        """An instant query's vector as ``{replica label value (or ""): value}``, NaN and infinite values left out."""
        try:
            response = await self.client.get(
                f"{self.url}/api/v1/query", params={"query": promql}, timeout=self.timeout_seconds
            )
        except httpx.TimeoutException as error:
            raise PrometheusUnavailable(f"Prometheus timed out after {self.timeout_seconds:g}s") from error
        except httpx.HTTPError as error:
            raise PrometheusUnavailable(f"Prometheus at {self.url} unreachable: {error.__class__.__name__}") from error
        try:
            answer = response.json()
        except ValueError as error:
            raise PrometheusUnavailable(f"Prometheus answered {response.status_code} with no JSON") from error
        if response.status_code != 200 or not isinstance(answer, dict) or answer.get("status") != "success":
            detail = answer.get("error", "") if isinstance(answer, dict) else ""
            raise PrometheusUnavailable(f"Prometheus answered {response.status_code}: {detail}".rstrip(": "))
        try:
            samples = [
                (s.get("metric", {}).get(self.replica_label, ""), float(s["value"][1]))
                for s in answer["data"]["result"]
            ]
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise PrometheusUnavailable(f"Prometheus answered an unexpected shape for {promql!r}") from error
        return {label: value for label, value in samples if math.isfinite(value)}

    def _replica(self, target: ReplicaTarget, answers: dict[str, dict[str, float]], fresh: bool) -> ReplicaSignals:
        waiting = answers["waiting"].get(target.name)
        running = answers["running"].get(target.name)
        if target.phase != "ready" or not fresh or waiting is None or running is None:
            return ReplicaSignals(target.name, target.phase, target.since)
        return ReplicaSignals(
            target.name,
            target.phase,
            target.since,
            waiting=waiting,
            running=running,
            kv_usage=answers.get("kv_usage", {}).get(target.name),
            max_num_seqs=answers.get("max_num_seqs", {}).get(target.name),
        )

    @staticmethod
    def _missing(now: float, desired: int, replicas: Sequence[ReplicaTarget], why: str) -> FleetSignals:
        return FleetSignals(
            time=now,
            desired=desired,
            replicas=tuple(ReplicaSignals(r.name, r.phase, r.since) for r in replicas),
            missing=why,
        )
