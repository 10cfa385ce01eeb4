"""The engine replicas the gateway knows: where they are, what they serve, whether they are up, their load.

Discovery (a static list, a file, or the EndpointSlices of the engine Service) decides which URLs exist; the
health checker decides which are serving, which models each one serves and the capacity its engine announces
(from its own ``/v1/models``); the proxy ejects one on a failed connect. Routing sees only the replicas that
are healthy and serve the requested model.

Load accounting follows ``shoal.gateway.routing``'s load measure. A lease charges the replica the request's
uncached prompt tokens until its first byte arrives (the engine has then prefilled it: ``Fleet.prefilled``),
and one sequence until it finishes; a replica that announces no capacity is also charged the request's output
budget until then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shoal.gateway.discovery import Backend
from shoal.gateway.prefix_index import PrefixIndex
from shoal.gateway.routing import Capacity, ReplicaView, RouteRequest


@dataclass
class Replica:
    url: str
    models: frozenset[str] = frozenset()
    healthy: bool = False
    failures: int = 0
    capacity: Capacity | None = None
    block_size: int | None = None  # as the engine announces it: shoal.gateway.block_size
    parents: dict[str, str] = field(default_factory=dict)  # LoRA adapter -> its base model, as /v1/models says
    load_tokens: int = 0
    in_flight: int = 0
    index: PrefixIndex = field(default_factory=PrefixIndex)
    kv_events_port: int | None = None  # its ZMQ KV-event publisher (vLLM's), as discovery found it

    def view(self) -> ReplicaView:
        return ReplicaView(self.url, self.load_tokens, self.index, self.in_flight, self.capacity, self.index.homes)


@dataclass
class Lease:
    """One request's claim on a replica, returned by ``Fleet.acquire`` and given back with ``release``."""

    replica: Replica
    prefill_tokens: int  # charged until the first byte (``Fleet.prefilled``)
    held_tokens: int  # charged until the request ends
    block_hashes: Sequence[int]


class Fleet:
    """The set of replicas, keyed by URL."""

    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}

    def set_backends(self, backends: Iterable[Backend]) -> tuple[list[Replica], list[Replica]]:
        """Makes the fleet exactly ``backends``; returns the replicas added and removed (a replica whose KV-event
        port changed is both: its follower starts over)."""
        wanted = {b.url.rstrip("/"): b.kv_events_port for b in backends}
        removed = [
            self.replicas.pop(url)
            for url, replica in list(self.replicas.items())
            if url not in wanted or wanted[url] != replica.kv_events_port
        ]
        added = [Replica(url, kv_events_port=wanted[url]) for url in sorted(wanted.keys() - self.replicas.keys())]
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
    def acquire(replica: Replica, request: RouteRequest, matched_blocks: int) -> Lease:
        """Charges ``request`` to ``replica``, which holds ``matched_blocks`` of its prompt."""
        prefill = request.prefill_tokens(matched_blocks)
        lease = Lease(
            replica, prefill, request.tokens_on(replica.capacity, matched_blocks) - prefill, request.block_hashes
        )
        replica.load_tokens += lease.prefill_tokens + lease.held_tokens
        replica.in_flight += 1
        replica.index.routed(request.block_hashes)
        return lease

    @staticmethod
    def prefilled(lease: Lease) -> None:
        """The first byte came back: the engine has computed the prompt, so it no longer counts as load."""
        lease.replica.load_tokens -= lease.prefill_tokens
        lease.prefill_tokens = 0

    @staticmethod
    def release(lease: Lease) -> None:
        replica = lease.replica
        replica.load_tokens -= lease.prefill_tokens + lease.held_tokens
        replica.in_flight -= 1
        replica.index.finished(lease.block_hashes)

    @staticmethod
    def eject(replica: Replica) -> None:
        """Takes a replica out of rotation until the health checker sees it ready again."""
        replica.healthy = False
        replica.index.desync()
