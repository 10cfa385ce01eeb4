"""Where an engine keeps its compiled kernels, so a restarted or added replica does not compile them again.

Triton compiles each kernel variant on first launch (seconds each on a GPU) and writes it to ``TRITON_CACHE_DIR``;
Shoal's C kernels for the CPU are built into ``$SHOAL_CACHE/kernels``. Both default to HOME, the pod's scratch
emptyDir at /tmp (``security.py``), which dies with the pod. ``spec.engine.kernelCache`` mounts a node's directory
or a claim at ``/kernel-cache`` instead, with both variables pointing into it; the shapes are ``spec.model.cache``'s
(``cache_volume``). Both caches are keyed by what they were built for (Triton: the kernel's source, constants and
GPU; Shoal's: the CPU's model and flags), so a directory shared by different machines stays correct.
"""

from __future__ import annotations

from typing import Any

from shoal.operator.builders.cache_volume import cache_volume
from shoal.operator.spec import EngineSpec

KERNEL_CACHE_DIR = "/kernel-cache"
KERNEL_CACHE_VOLUME = "kernel-cache"


def kernel_cache(engine: EngineSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, str]]]:
    """(volumes, mounts, env) for the engine pod: none unless ``kernelCache`` is set."""
    if engine.kernel_cache is None:
        return [], [], []
    env = [{"name": "TRITON_CACHE_DIR", "value": f"{KERNEL_CACHE_DIR}/triton"}]
    if engine.kind == "shoal":
        env.append({"name": "SHOAL_CACHE", "value": f"{KERNEL_CACHE_DIR}/shoal"})
    volume = cache_volume(KERNEL_CACHE_VOLUME, engine.kernel_cache)
    return [volume], [{"name": KERNEL_CACHE_VOLUME, "mountPath": KERNEL_CACHE_DIR}], env
