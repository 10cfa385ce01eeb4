"""The figures ``shoal up`` shows besides the autoscaler's signals: the fleet's prefix-cache hit rate and the
gateway's routing decisions by reason, both read from counters on the servers' ``/metrics`` pages.

The hit rate is over everything the current engines have looked up since they started (what the view's
figure and the dashboard's chart show); the routing counts are the gateway's totals, which the dashboard turns
into rates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from shoal.engine_kinds import ADAPTERS, MetricMap
from shoal.protocol.prom_text import samples_named

SHOAL_METRICS = ADAPTERS["shoal"].metrics

ROUTING_DECISIONS = "shoal_gateway_routing_decisions_total"
HELD_REQUESTS = "shoal_gateway_requests_held"


async def _page(client: httpx.AsyncClient, url: str) -> str | None:
    try:
        response = await client.get(url + "/metrics", timeout=2.0)
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


@dataclass(frozen=True)
class Extras:
    prefix_hit_rate: float | None  # over everything the current engines have looked up; None before any lookup
    routing: dict[str, float]  # reason -> decisions so far
    held_requests: int  # held by the gateway while no engine is ready (scale-from-zero demand)


async def read_extras(
    client: httpx.AsyncClient, engine_urls: Sequence[str], gateway_url: str, metrics: MetricMap = SHOAL_METRICS
) -> Extras:
    """Reads the gateway's and every engine's counters once (the engines' named by their kind's ``metrics``;
    no hit rate from a kind that does not count the prompt tokens it looked up)."""
    pages = await asyncio.gather(*(_page(client, url) for url in [gateway_url, *engine_urls]))
    gateway = pages[0] or ""
    routing: dict[str, float] = {}
    for labels, value in samples_named(gateway, ROUTING_DECISIONS):
        routing[labels.get("reason", "?")] = routing.get(labels.get("reason", "?"), 0.0) + value
    engines = [page for page in pages[1:] if page is not None]
    hits = queries = 0.0
    if metrics.prefix_hit_tokens is not None and metrics.prefix_query_tokens is not None:
        hits = sum(v for page in engines for _, v in samples_named(page, metrics.prefix_hit_tokens + "_total"))
        queries = sum(v for page in engines for _, v in samples_named(page, metrics.prefix_query_tokens + "_total"))
    held = sum(v for _, v in samples_named(gateway, HELD_REQUESTS))
    return Extras(hits / queries if queries else None, routing, int(held))
