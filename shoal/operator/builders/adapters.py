"""How engine pods get ``spec.adapters``: each hf:// or s3:// adapter fetched before the engine starts, every
adapter named on its command line.

A fetched adapter has an init container of its own, ``fetch-adapter-<i>`` (``i`` its place in the list), running
``shoal fetch-model`` into the model cache volume as the model's fetcher does (same image, credentials Secret and
``s3Endpoint``, termination message), with ``--link`` pointing ``/model-link/adapter-<i>`` at the fetched
snapshot; the engine, of any kind, is given that link. An absolute path is given as it is. The engine loads every
adapter at start (``--lora-modules NAME=PATH``), so changing the list changes the pod template and the Deployment
rolls its engines; one that cannot load stops its engine's start, and the pod's last log lines say why.
"""

from __future__ import annotations

from shoal.operator import adapters
from shoal.operator.builders.cache_volume import cache_volume
from shoal.operator.builders.model import (
    CACHE_DIR,
    CACHE_VOLUME,
    FETCH_ARGS,
    LINK_DIR,
    LINK_VOLUME,
    Objects,
    engine_fetcher,
)
from shoal.operator.spec import InferenceDeploymentSpec

FETCH_PREFIX = "fetch-adapter-"
ANNOTATION = "shoal.dev/adapters"  # on the engine pods: the names their command line loads, in order


def pod_annotations(spec: InferenceDeploymentSpec) -> dict[str, str]:
    """What tells the status which adapters a pod loads (:mod:`shoal.operator.adapters_ready`)."""
    return {ANNOTATION: ",".join(a.name for a in spec.adapters)} if spec.adapters else {}


def adapter_link(index: int) -> str:
    return f"{LINK_DIR}/adapter-{index}"


def adapter_paths(spec: InferenceDeploymentSpec) -> tuple[tuple[str, str], ...]:
    """Each adapter as (name, the path the engine reads it from)."""
    return tuple(
        (a.name, adapter_link(i) if adapters.fetched(a.source) else a.source) for i, a in enumerate(spec.adapters)
    )


def engine_adapters(
    spec: InferenceDeploymentSpec, images: tuple[str, str], volumes: Objects, mounts: Objects
) -> tuple[Objects, Objects, Objects]:
    """The (init containers, volumes, engine container mounts) the adapters add to a pod that already has the
    model's ``volumes`` and ``mounts``; ``images``: the engine's and the gateway's, as for the model's fetcher."""
    fetched = [(i, a) for i, a in enumerate(spec.adapters) if adapters.fetched(a.source)]
    if not fetched:
        return [], [], []
    cache = {"name": CACHE_VOLUME, "mountPath": CACHE_DIR}
    link = {"name": LINK_VOLUME, "mountPath": LINK_DIR}
    inits = [
        engine_fetcher(
            spec, f"{FETCH_PREFIX}{i}", images, [*FETCH_ARGS, "--link", adapter_link(i)], [cache, link], a.source
        )
        for i, a in fetched
    ]
    present = {v["name"] for v in volumes}
    wanted = (cache_volume(CACHE_VOLUME, spec.model.cache), {"name": LINK_VOLUME, "emptyDir": {}})
    mounted = {m["name"] for m in mounts}
    engine_mounts = [{**m, "readOnly": True} for m in (cache, link) if m["name"] not in mounted]
    return inits, [v for v in wanted if v["name"] not in present], engine_mounts
