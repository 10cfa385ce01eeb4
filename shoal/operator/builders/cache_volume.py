"""A ``CacheVolume`` (``spec.model.cache``, ``spec.engine.kernelCache``) as a pod volume."""

from __future__ import annotations

from typing import Any

from shoal.operator.spec import CacheVolume


def cache_volume(name: str, cache: CacheVolume | None) -> dict[str, Any]:
    """A node's directory (created if missing) or a claim, as the pod volume ``name``; unset: an emptyDir."""
    if cache is None:
        return {"name": name, "emptyDir": {}}
    if cache.host_path is not None:
        return {"name": name, "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}
    return {"name": name, "persistentVolumeClaim": {"claimName": cache.claim_name}}
