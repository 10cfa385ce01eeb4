"""The standby pool on a cluster (``autoscaling.standby``): which engine pods serve, which wait. Pure.

Every engine pod carries the label ``shoal.dev/pool``: ``serving`` by the pod template, ``standby`` once the
operator moves it into the pool. The engine Service selects ``serving`` pods only, so a pool pod is no endpoint and
the gateway (which follows the Service's EndpointSlices) never routes to it; the Deployment, whose selector may not
change, keeps every pod, at ``desired + standby`` replicas (:func:`deployment_replicas`).

The law, each pass: of the non-terminating pods, the pool holds ``min(standby, pods - desired)`` and the rest serve,
chosen in this order of preference to serve: already serving and Ready, then Ready in the pool (a promotion: an
endpoint within the EndpointSlice controller's second), then still loading (serving first), oldest first within
each. Hence a scale-up promotes a ready pool pod at once and the ReplicaSet's new pod, which starts ``serving``, is
demoted before it is ready; a scale-in whose victim is a pool pod demotes a serving one, which leaves the endpoints
and finishes its requests while staying up. Named rules:

- **surplus serves**: pods beyond ``desired + standby`` (a scale-in the ReplicaSet has not carried out yet) serve
  rather than join the pool, so a scale-in never demotes one pod while the ReplicaSet deletes another;
- **unlabelled serves**: a pod without the label (made before the label existed) counts as serving and is
  labelled, before the Service's selector starts asking for it;
- **terminating pods are left alone**: they drain as they are.

With the operator down, new pods serve by their template: the pool degrades to no pool, never to no serving.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shoal.operator.spec import GROUP, InferenceDeploymentSpec

Pool = Literal["serving", "standby"]
POOL_LABEL = f"{GROUP}/pool"
SERVING: Pool = "serving"
STANDBY: Pool = "standby"


@dataclass(frozen=True)
class EnginePod:
    """What the choice needs of one engine pod; ``pool`` None: unlabelled."""

    name: str
    pool: Pool | None
    ready: bool
    terminating: bool = False
    created: str = ""  # creationTimestamp (RFC 3339 sorts as text)


def deployment_replicas(spec: InferenceDeploymentSpec, desired: int) -> int:
    """The engine Deployment's replicas: the serving engines plus the pool."""
    return desired + spec.autoscaling.standby


def engine_pod(view: Mapping[str, Any]) -> EnginePod:
    """An :class:`EnginePod` from the operator's watch of a pod (``metadata``, ``status``)."""
    meta, status = view.get("metadata", {}), view.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    pool = (meta.get("labels") or {}).get(POOL_LABEL)
    return EnginePod(
        name=meta["name"],
        pool=pool if pool in (SERVING, STANDBY) else None,
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        created=meta.get("creationTimestamp") or "",
    )


def assign(pods: Sequence[EnginePod], desired: int, standby: int) -> dict[str, Pool]:
    """Each non-terminating pod's pool by the law above (terminating pods are not in the answer)."""
    live = [p for p in pods if not p.terminating]
    ranked = sorted(live, key=lambda p: (_rank(p), p.created, p.name))
    pooled = min(standby, max(0, len(live) - desired))
    serving = len(live) - pooled
    return {p.name: SERVING if i < serving else STANDBY for i, p in enumerate(ranked)}


def label_patches(pods: Sequence[EnginePod], desired: int, standby: int) -> dict[str, Pool]:
    """The pods whose label must change (unlabelled ones included), with their new pool."""
    wanted = assign(pods, desired, standby)
    return {p.name: wanted[p.name] for p in pods if p.name in wanted and p.pool != wanted[p.name]}


@dataclass(frozen=True)
class PoolCount:
    """The pool as the status reports it: its non-terminating pods, and how many of them are Ready."""

    pods: int = 0
    ready: int = 0


NO_POOL = PoolCount()


def pool_count(views: Iterable[Mapping[str, Any]], patches: Mapping[str, Pool]) -> PoolCount:
    """The pool once ``patches`` are applied."""
    pool = [p for p in map(engine_pod, views) if not p.terminating and patches.get(p.name, p.pool) == STANDBY]
    return PoolCount(len(pool), sum(p.ready for p in pool))


def serving_at(views: Sequence[Mapping[str, Any]], desired: int, standby: int) -> list[Mapping[str, Any]]:
    """The pods that serve at ``desired`` engines: what the policy sees (never the pool, nor a new pod about to
    join it)."""
    return serving_views(views, label_patches(list(map(engine_pod, views)), desired, standby))


def serving_views(views: Iterable[Mapping[str, Any]], patches: Mapping[str, Pool]) -> list[Mapping[str, Any]]:
    """The pods that serve once ``patches`` are applied."""
    kept = []
    for view in views:
        pod = engine_pod(view)
        if patches.get(pod.name, pod.pool) != STANDBY:
            kept.append(view)
    return kept


def _rank(pod: EnginePod) -> int:
    """Lower serves first: serving and Ready, pool and Ready, serving and loading, pool and loading."""
    in_pool = pod.pool == STANDBY
    return (0 if pod.ready else 2) + (1 if in_pool else 0)
