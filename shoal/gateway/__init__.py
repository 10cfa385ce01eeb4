"""The routing gateway: auth, quotas, streaming passthrough and prefix-aware routing over engine replicas.

Never imports torch or the engine (checked by import-linter): it runs on CPU-only nodes in front of the fleet.
"""

from shoal.gateway.routing import (
    Decision,
    LeastLoad,
    PrefixAware,
    ReplicaView,
    RoundRobin,
    RouteRequest,
    RoutingPolicy,
    make_policy,
)

__all__ = [
    "Decision",
    "LeastLoad",
    "PrefixAware",
    "ReplicaView",
    "RoundRobin",
    "RouteRequest",
    "RoutingPolicy",
    "make_policy",
]
