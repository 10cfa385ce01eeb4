"""Active health checks: which replicas are ready, and which models each serves.

A replica enters rotation when its ``/ready`` answers 200 and its ``/v1/models`` lists what it serves; it
leaves after ``fail_threshold`` failed checks in a row (the proxy also ejects it at once on a refused
connection, and the next good check brings it back).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from shoal.gateway.replicas import Fleet, Replica

log = logging.getLogger(__name__)


async def probe(session: aiohttp.ClientSession, replica: Replica, timeout: float) -> frozenset[str] | None:
    """The models a ready replica serves, or ``None`` if it is not ready."""
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    try:
        async with session.get(replica.url + "/ready", timeout=client_timeout) as response:
            if response.status != 200:
                return None
        async with session.get(replica.url + "/v1/models", timeout=client_timeout) as response:
            if response.status != 200:
                return None
            listing = await response.json(content_type=None)
        return frozenset(str(card["id"]) for card in listing["data"])
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
        return None


async def check(session: aiohttp.ClientSession, fleet: Fleet, replica: Replica, timeout: float,
                fail_threshold: int) -> None:
    """One check of one replica, applied to its state."""
    models = await probe(session, replica, timeout)
    if fleet.replicas.get(replica.url) is not replica:
        return  # discovery removed it meanwhile
    if models is not None:
        if not replica.healthy:
            log.info("replica %s is ready, serving %s", replica.url, sorted(models))
        replica.models, replica.healthy, replica.failures = models, True, 0
        return
    replica.failures += 1
    if replica.healthy and replica.failures >= fail_threshold:
        log.warning("replica %s failed %d health checks; ejected", replica.url, replica.failures)
        Fleet.eject(replica)

