"""The engine replicas the gateway knows: where they are, what they serve, whether they are up, their load.

Discovery (a static list, a file, or the EndpointSlices of the engine Service) decides which URLs exist; the
health checker decides which are serving and which models each one serves (from its own ``/v1/models``); the
proxy counts each replica's in-flight tokens and ejects one on a failed connect. Routing sees only the
replicas that are healthy and serve the requested model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shoal.gateway.prefix_index import PrefixIndex
from shoal.gateway.routing import ReplicaView


@dataclass
class Replica:
    url: str
    models: frozenset[str] = frozenset()
    healthy: bool = False
    failures: int = 0
    load_tokens: int = 0
    in_flight: int = 0
    index: PrefixIndex = field(default_factory=PrefixIndex)

    def view(self) -> ReplicaView:
        return ReplicaView(self.url, self.load_tokens, self.index)


@dataclass(frozen=True)
class Lease:
    """One request's claim on a replica, returned by ``Fleet.acquire`` and given back with ``release``."""

    replica: Replica
    cost_tokens: int
    block_hashes: Sequence[int]


class Fleet:
    """The set of replicas, keyed by URL."""

    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}

    def set_urls(self, urls: Iterable[str]) -> tuple[list[Replica], list[Replica]]:
        """Makes the fleet exactly ``urls``; returns the replicas added and removed."""
        wanted = {url.rstrip("/") for url in urls}
        removed = [self.replicas.pop(url) for url in list(self.replicas) if url not in wanted]
        added = [Replica(url) for url in sorted(wanted - self.replicas.keys())]
        for replica in added:
            self.replicas[replica.url] = replica
        return added, removed

    def models(self) -> set[str]:
        """Every model some healthy replica serves."""
        return {model for r in self.replicas.values() if r.healthy for model in r.models}

    def known_models(self) -> set[str]:
        """Every model any replica has ever reported, healthy or not (a 503 rather than a 404 when all are down)."""
        return {model for r in self.replicas.values() for model in r.models}

    def candidates(self, model: str, exclude: Iterable[str] = ()) -> list[Replica]:
        skip = set(exclude)
        return [r for r in self.replicas.values() if r.healthy and model in r.models and r.url not in skip]

    @staticmethod
    def acquire(replica: Replica, cost_tokens: int, block_hashes: Sequence[int]) -> Lease:
        replica.load_tokens += cost_tokens
        replica.in_flight += 1
        replica.index.routed(block_hashes)
        return Lease(replica, cost_tokens, block_hashes)

    @staticmethod
    def release(lease: Lease) -> None:
        replica = lease.replica
        replica.load_tokens -= lease.cost_tokens
        replica.in_flight -= 1
        replica.index.finished(lease.block_hashes)

    @staticmethod
    def eject(replica: Replica) -> None:
        """Takes a replica out of rotation until the health checker sees it ready again."""
        replica.healthy = False
        replica.index.desync()
