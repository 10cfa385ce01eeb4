"""How engine pods get ``spec.adapters``: Shoal's engine from a ConfigMap at start and through its run-time
endpoints after; another kind (vLLM) on its command line, each hf:// or s3:// adapter fetched before it starts.

**Kind shoal.** The list lives in a ConfigMap ``<name>-adapters`` (key ``adapters.json``, vLLM's JSON form of
``--lora-modules``: ``{"name", "path"}`` objects, each path the source as written), mounted into every engine pod
at ``/etc/shoal/adapters``; the engine loads it after its model and before ``/ready`` (``--lora-modules-file``),
so a new pod never serves without the adapters, and serves ``/v1/load_lora_adapter`` and
``/v1/unload_lora_adapter`` (``--allow-runtime-lora-updating``), through which the operator brings running
engines to a changed list (:mod:`shoal.operator.adapter_sync`). The engine fetches hf:// and s3:// adapters
itself into the model cache (``--download-dir /model-cache``, writable), with the model's store access
(``s3Endpoint``, the ``credentialsSecret`` as ``envFrom``). Nothing in the pod template depends on the list, only
on whether there is one (LoRA on), and its slots are ``engine.maxLoras``, else ``adapters.RUNTIME_SLOTS``: a change of the
list rolls no engine.

**Other kinds.** A fetched adapter has an init container of its own, ``fetch-adapter-<i>`` (``i`` its place in
the list), running ``shoal fetch-model`` into the model cache volume as the model's fetcher does (same image,
credentials Secret and ``s3Endpoint``, termination message), with ``--link`` pointing ``/model-link/adapter-<i>``
at the fetched snapshot; the engine is given that link, an absolute path as it is, every adapter on its command
line (``--lora-modules NAME=PATH``: vLLM's load endpoint takes local paths only), so changing the list changes
the pod template and the Deployment rolls its engines; one that cannot load stops its engine's start, and the
pod's last log lines say why.
"""

from __future__ import annotations

import json
from typing import Any

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
    store_access,
)
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

FETCH_PREFIX = "fetch-adapter-"
ANNOTATION = "shoal.dev/adapters"  # on other kinds' engine pods: the names their command line loads, in order
CONFIG_VOLUME = "adapters"
CONFIG_DIR = "/etc/shoal/adapters"
CONFIG_KEY = "adapters.json"
MODULES_FILE = f"{CONFIG_DIR}/{CONFIG_KEY}"


def at_run_time(spec: InferenceDeploymentSpec) -> bool:
    """Whether the engines load ``spec.adapters`` from the ConfigMap and at run time (kind shoal, a list given)."""
    return spec.engine.kind == "shoal" and bool(spec.adapters)


def config_map_name(owner: Owner) -> str:
    return f"{owner.name}-adapters"


def modules_file(spec: InferenceDeploymentSpec) -> str:
    """The ConfigMap's ``adapters.json``: vLLM's JSON form of ``--lora-modules``."""
    return json.dumps([{"name": a.name, "path": a.source} for a in spec.adapters], indent=1)


def adapters_config_map(owner: Owner, spec: InferenceDeploymentSpec) -> list[dict[str, Any]]:
    """The ConfigMap kind shoal's engines load at start (none when the adapters are on the command line)."""
    if not at_run_time(spec):
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": owner.metadata(config_map_name(owner), "engine"),
            "data": {CONFIG_KEY: modules_file(spec)},
        }
    ]


def pod_annotations(spec: InferenceDeploymentSpec) -> dict[str, str]:
    """What tells the status which adapters a pod of another kind loads (:mod:`shoal.operator.adapters_ready`)."""
    if not spec.adapters or at_run_time(spec):
        return {}
    return {ANNOTATION: ",".join(a.name for a in spec.adapters)}


def adapter_link(index: int) -> str:
    return f"{LINK_DIR}/adapter-{index}"


def adapter_paths(spec: InferenceDeploymentSpec) -> tuple[tuple[str, str], ...]:
    """Each adapter on the command line as (name, the path the engine reads it from); none for kind shoal."""
    if at_run_time(spec):
        return ()
    return tuple(
        (a.name, adapter_link(i) if adapters.fetched(a.source) else a.source) for i, a in enumerate(spec.adapters)
    )


def engine_access(spec: InferenceDeploymentSpec) -> tuple[Objects, Objects]:
    """The engine container's extra (``env``, ``envFrom``): the model's store access, where it fetches adapters."""
    return store_access(spec) if at_run_time(spec) else ([], [])


def engine_adapters(
    owner: Owner, spec: InferenceDeploymentSpec, images: tuple[str, str], volumes: Objects, mounts: Objects
) -> tuple[Objects, Objects, Objects]:
    """The (init containers, volumes, engine container mounts) the adapters add to a pod that already has the
    model's ``volumes`` and ``mounts``; ``images``: the engine's and the gateway's, as for the model's fetcher."""
    present, mounted = {v["name"] for v in volumes}, {m["name"] for m in mounts}
    cache = {"name": CACHE_VOLUME, "mountPath": CACHE_DIR}
    if at_run_time(spec):
        config = {"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(owner)}}
        wanted = [config] + ([] if CACHE_VOLUME in present else [cache_volume(CACHE_VOLUME, spec.model.cache)])
        engine_mounts = [{"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}]
        return [], wanted, engine_mounts + ([] if CACHE_VOLUME in mounted else [cache])
    fetched = [(i, a) for i, a in enumerate(spec.adapters) if adapters.fetched(a.source)]
    if not fetched:
        return [], [], []
    link = {"name": LINK_VOLUME, "mountPath": LINK_DIR}
    inits = [
        engine_fetcher(
            spec, f"{FETCH_PREFIX}{i}", images, [*FETCH_ARGS, "--link", adapter_link(i)], [cache, link], a.source
        )
        for i, a in fetched
    ]
    wanted = [cache_volume(CACHE_VOLUME, spec.model.cache), {"name": LINK_VOLUME, "emptyDir": {}}]
    engine_mounts = [{**m, "readOnly": True} for m in (cache, link) if m["name"] not in mounted]
    return inits, [v for v in wanted if v["name"] not in present], engine_mounts
