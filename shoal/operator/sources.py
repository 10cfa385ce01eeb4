"""Where the operator's autoscaler gets its signals: the fleet's pods, its engines' metrics, its gateways' demand.

:class:`ClusterObserver` is the :class:`~shoal.operator.autoscaler.FleetObserver` the operator runs. The pods
come from the operator's own watch (``FleetRef.replicas``: ready, starting or draining since when, and their
address); the engine metrics from the source ``spec.autoscaling.metrics`` names, one instance per fleet (the
direct scrape keeps counter values between observations):

- ``prometheus``: :class:`~shoal.autoscale.prometheus_source.PrometheusSource` at the spec's ``prometheusUrl``,
  else the operator's ``--prometheus-url``, over the series ``namespace="<ns>",pod=~"<name>-engine-.*"`` (the
  labels a PodMonitor, or any Kubernetes scrape config, gives them);
- ``scrape``: :class:`~shoal.autoscale.scrape_source.ScrapeSource`, every ready engine pod's ``/metrics``.

The requests the gateways hold for want of a ready engine (scale from zero) are ``shoal_gateway_requests_held``:
summed over the fleet's gateway pods through the same Prometheus, or read from the gateway Service's
``/metrics`` when scraping (one gateway replica's count: any held request is enough to scale from zero). Demand
that cannot be read counts as none held; it never invents load.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import httpx

from shoal.autoscale.prometheus_source import PrometheusSource
from shoal.autoscale.scrape_source import ScrapeSource
from shoal.autoscale.signals import FleetSignals, ReplicaPhase
from shoal.autoscale.source import MetricsSource, ReplicaTarget
from shoal.engine_kinds import adapter
from shoal.operator.autoscaler import FleetAutoscaler, FleetKey, FleetRef
from shoal.operator.naming import ENGINE_PORT
from shoal.protocol.prom_text import family_sum

HELD = "shoal_gateway_requests_held"


def _seconds(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def replica_targets(pods: Iterable[Mapping[str, Any]]) -> tuple[ReplicaTarget, ...]:
    """The engine pods as the sources want them: terminating pods are draining, unready ones starting (since
    their creation), ready ones ready since their Ready condition turned True."""
    targets = []
    for pod in pods:
        meta, status = pod.get("metadata", {}), pod.get("status") or {}
        ready: Mapping[str, Any] = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
        phase: ReplicaPhase = "starting"
        since = _seconds(meta.get("creationTimestamp"))
        if meta.get("deletionTimestamp"):
            phase, since = "draining", _seconds(meta["deletionTimestamp"])
        elif ready.get("status") == "True":
            phase, since = "ready", _seconds(ready.get("lastTransitionTime")) or since
        ip = status.get("podIP")
        targets.append(ReplicaTarget(meta["name"], phase, since or 0.0, f"http://{ip}:{ENGINE_PORT}" if ip else None))
    return tuple(sorted(targets, key=lambda t: t.name))


class ClusterObserver:
    """Engine signals plus gateway demand for each fleet, with one metrics source per fleet."""

    def __init__(self, client: httpx.AsyncClient, prometheus_url: str | None, timeout_s: float = 2.0) -> None:
        self.client, self.prometheus_url, self.timeout_s = client, prometheus_url, timeout_s
        self._sources: dict[FleetKey, tuple[tuple[str, str | None, str], MetricsSource]] = {}

    def _prometheus(self, fleet: FleetRef) -> str | None:
        return fleet.spec.autoscaling.metrics.prometheus_url or self.prometheus_url

    def _source(self, fleet: FleetRef) -> MetricsSource | str:
        kind = fleet.spec.autoscaling.metrics.source
        url = self._prometheus(fleet) if kind == "prometheus" else None
        if kind == "prometheus" and url is None:
            return "metrics.source is prometheus but neither prometheusUrl nor the operator's --prometheus-url is set"
        engine = fleet.spec.engine.kind
        cached = self._sources.get(fleet.key)
        if cached is not None and cached[0] == (kind, url, engine):
            return cached[1]
        source: MetricsSource
        metrics = adapter(engine).metrics  # the engine kind's series for each signal (docs/engines.md)
        if url is not None:
            selector = f'namespace="{fleet.namespace}",pod=~"{fleet.name}-engine-.*"'
            source = PrometheusSource(self.client, url, selector, timeout_seconds=self.timeout_s, metrics=metrics)
        else:
            source = ScrapeSource(self.client, timeout_seconds=self.timeout_s, metrics=metrics)
        self._sources[fleet.key] = ((kind, url, engine), source)
        return source

    async def observe(self, fleet: FleetRef, desired: int, now: float) -> FleetSignals:
        source = self._source(fleet)
        if isinstance(source, str):
            return FleetSignals(time=now, desired=desired, missing=source)
        signals, held = await asyncio.gather(source.observe(now, desired, fleet.replicas), self._held(fleet))
        return replace(signals, held_requests=held)

    async def _held(self, fleet: FleetRef) -> int:
        if fleet.spec.gateway.replicas == 0:
            return 0
        try:
            if fleet.spec.autoscaling.metrics.source == "prometheus":
                url = self._prometheus(fleet)
                query = f'sum({HELD}{{namespace="{fleet.namespace}",pod=~"{fleet.name}-gateway-.*"}})'
                response = await self.client.get(f"{url}/api/v1/query", params={"query": query}, timeout=self.timeout_s)
                result = response.json()["data"]["result"]
                value = float(result[0]["value"][1]) if result else 0.0
            else:
                service = f"http://{fleet.name}.{fleet.namespace}.svc/metrics"  # the gateway Service, port 80
                page = (await self.client.get(service, timeout=self.timeout_s)).text
                value = family_sum(page, HELD)
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return 0
        return int(value) if math.isfinite(value) and value > 0 else 0

    def forget(self, key: FleetKey) -> None:
        self._sources.pop(key, None)


def operator_autoscaler(prometheus_url: str | None, timeout_s: float) -> FleetAutoscaler:
    """The operator's autoscaler: ShoalPolicy per fleet over a :class:`ClusterObserver`."""
    return FleetAutoscaler(ClusterObserver(httpx.AsyncClient(), prometheus_url, timeout_s), timeout_s=timeout_s + 1.0)
