"""The figures ``shoal up`` shows besides the autoscaler's signals: the fleet's prefix-cache hit rate and the
gateway's routing decisions by reason, both read from counters on the servers' ``/metrics`` pages.

Counters only grow, so a rate is the change since the previous reading; an engine that restarted starts from
zero again, and its new total is taken as its change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from shoal.local.metrics import samples_named

PREFIX_HITS = "shoal_engine_prefix_cache_hits_tokens_total"
PREFIX_QUERIES = "shoal_engine_prefix_cache_queries_tokens_total"
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
    prefix_hit_rate: float | None  # since the previous reading; None when no prompt was looked up
    prefix_hit_rate_total: float | None  # over everything the current engines have seen
    routing: dict[str, float]  # reason -> decisions so far
    held_requests: int  # held by the gateway while no engine is ready (scale-from-zero demand)


@dataclass
class ExtraFigures:
    """Reads the counters on each call and keeps the previous totals for the rates."""

    _engines: dict[str, tuple[float, float]] = field(default_factory=dict)

    async def read(self, client: httpx.AsyncClient, engine_urls: Sequence[str], gateway_url: str) -> Extras:
        pages = await asyncio.gather(*(_page(client, url) for url in [gateway_url, *engine_urls]))
        routing: dict[str, float] = {}
        for labels, value in samples_named(pages[0] or "", ROUTING_DECISIONS):
            routing[labels.get("reason", "?")] = routing.get(labels.get("reason", "?"), 0.0) + value
        hits = queries = total_hits = total_queries = 0.0
        totals: dict[str, tuple[float, float]] = {}
        for url, page in zip(engine_urls, pages[1:]):
            if page is None:
                continue
            now = (sum(v for _, v in samples_named(page, PREFIX_HITS)),
                   sum(v for _, v in samples_named(page, PREFIX_QUERIES)))
            before = self._engines.get(url, (0.0, 0.0))
            if now[1] < before[1]:  # the engine restarted
                before = (0.0, 0.0)
            hits, queries = hits + now[0] - before[0], queries + now[1] - before[1]
            total_hits, total_queries = total_hits + now[0], total_queries + now[1]
            totals[url] = now
        self._engines = totals
        held = sum(v for _, v in samples_named(pages[0] or "", HELD_REQUESTS))
        return Extras(hits / queries if queries else None,
                      total_hits / total_queries if total_queries else None, routing, int(held))
