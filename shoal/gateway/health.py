"""Active health checks: which replicas are ready, and which models each serves.

A replica enters rotation when its readiness path (the engine kind's: Shoal's ``/ready``, vLLM's, SGLang's and
llama-server's ``/health``) answers 200 and its ``/v1/models`` lists what it serves (and, from a Shoal engine,
its scheduler limits: the ``Capacity`` routing measures its load against); it leaves
after ``fail_threshold`` failed checks in a row (the proxy also ejects it at once on a refused connection, and
the next good check brings it back).
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp

from shoal.gateway.replicas import Fleet, Replica
from shoal.gateway.routing import Capacity

log = logging.getLogger(__name__)


def capacity_of(cards: list[dict[str, Any]]) -> Capacity | None:
    """The scheduler limits a Shoal engine lists with its models; ``None`` from engines that list none."""
    for card in cards:
        budget, seqs = card.get("max_num_batched_tokens"), card.get("max_num_seqs")
        if isinstance(budget, int) and isinstance(seqs, int) and budget >= 1 and seqs >= 1:
            return Capacity(budget, seqs)
    return None


def block_size_of(cards: list[dict[str, Any]]) -> int | None:
    """The KV block size a Shoal engine lists with its models (``None`` from engines that list none)."""
    sizes = [card.get("block_size") for card in cards]
    return next((size for size in sizes if isinstance(size, int) and size >= 1), None)


def parents_of(cards: list[dict[str, Any]]) -> dict[str, str]:
    """LoRA adapter -> the base model it adapts, from the cards that name a ``parent`` (vLLM's and Shoal's)."""
    return {str(card["id"]): card["parent"] for card in cards if isinstance(card.get("parent"), str)}


Probe = tuple[frozenset[str], Capacity | None, int | None, dict[str, str]]


async def probe(
    session: aiohttp.ClientSession, replica: Replica, timeout: float, ready_path: str = "/ready"
) -> Probe | None:
    """The models a ready replica serves, its capacity and block size, its adapters' parents, or ``None`` if it is
    not ready."""
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    try:
        async with session.get(replica.url + ready_path, timeout=client_timeout) as response:
            if response.status != 200:
                return None
        async with session.get(replica.url + "/v1/models", timeout=client_timeout) as response:
            if response.status != 200:
                return None
            listing = await response.json(content_type=None)
        models = frozenset(str(card["id"]) for card in listing["data"])  # a card that is no object: TypeError
        cards = listing["data"]
        return models, capacity_of(cards), block_size_of(cards), parents_of(cards)
    except (TimeoutError, aiohttp.ClientError, ValueError, KeyError, TypeError):
        return None


async def check(
    session: aiohttp.ClientSession,
    fleet: Fleet,
    replica: Replica,
    timeout: float,
    fail_threshold: int,
    ready_path: str = "/ready",
) -> None:
    """One check of one replica, applied to its state."""
    found = await probe(session, replica, timeout, ready_path)
    if fleet.replicas.get(replica.url) is not replica:
        return  # discovery removed it meanwhile
    if found is not None:
        models, capacity, block_size, parents = found
        replica.block_size = block_size or replica.block_size
        replica.parents = parents
        if not replica.healthy:
            log.info("replica %s is ready, serving %s with %s", replica.url, sorted(models), capacity)
        replica.models, replica.capacity, replica.healthy, replica.failures = models, capacity, True, 0
        return
    replica.failures += 1
    if replica.healthy and replica.failures >= fail_threshold:
        log.warning("replica %s failed %d health checks; ejected", replica.url, replica.failures)
        Fleet.eject(replica)
