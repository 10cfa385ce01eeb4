"""A small async Kubernetes client for the few calls kopf does not make for us: server-side apply of the
children and API discovery.

It reuses kopf's credentials (:class:`kopf.ConnectionInfo`, from the ServiceAccount in a pod or a kubeconfig
outside), so the operator authenticates one way for both. Server-side apply with the field manager
``shoal-operator`` makes a reconcile idempotent: applying what is already there is a no-op for the apiserver
(no new resourceVersion, no watch event), so re-running a reconcile writes nothing.

Why a client of our own rather than ``kubernetes_asyncio`` (already the gateway's dependency) or lightkube: the
operator needs exactly seven calls, all generic over the kind: server-side apply with the ``shoal-operator`` field
manager and ``force`` for eleven kinds, two of them the Prometheus Operator's custom resources (and the
InferenceDeployment CRD itself, with ``--manage-crd``); a merge patch of the status subresource (the alert pass,
outside kopf's handlers); create-unless-exists for the generated API-key Secret (never a read of it); a merge patch
of one Deployment's replicas; a merge patch of one pod's labels (the standby pool); an Event; API discovery. Here
each is one HTTP request, authenticated with kopf's own :class:`kopf.ConnectionInfo`, so the watches and the writes
share one credential path and one source of truth for it. ``kubernetes_asyncio`` has a typed method per kind and API group (custom objects through a separate API), takes
server-side apply only through a content-type override, and loads credentials its own way (writing kubeconfig
certificate data to temporary files too); lightkube would fit the calls better but is a new dependency with its own
config loading, to be mapped from kopf's. The restart that writes nothing
(``tests/operator/test_operator_restart.py``) is the reconciler's doing (it applies only on drift), not the
client's: replacing this module would have to keep that test green. Its one cost: the ``ssl`` module loads a client
certificate only from a file, so certificate data is written to a 0700 temporary directory, removed on
:meth:`KubeClient.close`.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import kopf

from shoal.operator.naming import FIELD_MANAGER

# kind -> plural, for the kinds the operator writes (the chart's ClusterRole grants exactly these).
PLURALS: dict[str, str] = {
    "Deployment": "deployments",
    "Service": "services",
    "ConfigMap": "configmaps",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "PodMonitor": "podmonitors",
    "PrometheusRule": "prometheusrules",
    "NetworkPolicy": "networkpolicies",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Secret": "secrets",
    "CustomResourceDefinition": "customresourcedefinitions",  # its own, with --manage-crd
}


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


def collection_path(obj: Mapping[str, Any]) -> str:
    """Where ``obj``'s kind is listed: in its namespace, or cluster-wide for a cluster-scoped object (the CRD)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    namespace = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{namespace}/{PLURALS[kind]}" if namespace else f"{prefix}/{PLURALS[kind]}"


def object_path(obj: Mapping[str, Any]) -> str:
    return f"{collection_path(obj)}/{obj['metadata']['name']}"


def _data(value: str | bytes) -> bytes:
    """kubeconfig ``*-data`` fields are base64 text."""
    return base64.b64decode(value) if isinstance(value, str) else value


def _ssl_context(info: kopf.ConnectionInfo, workdir: Path) -> ssl.SSLContext | bool:
    if info.insecure:
        return False
    context = ssl.create_default_context()
    if info.ca_path:
        context.load_verify_locations(cafile=os.fsdecode(info.ca_path))
    elif info.ca_data:
        context.load_verify_locations(cadata=_data(info.ca_data).decode())
    cert, key = info.certificate_path, info.private_key_path
    if info.certificate_data:
        cert = workdir / "client.crt"
        cert.write_bytes(_data(info.certificate_data))
    if info.private_key_data:
        key = workdir / "client.key"
        key.write_bytes(_data(info.private_key_data))
    if cert:
        context.load_cert_chain(os.fsdecode(cert), os.fsdecode(key) if key else None)
    return context


class KubeClient:
    """Async HTTP to the apiserver with kopf's credentials."""

    def __init__(self, info: kopf.ConnectionInfo) -> None:
        self._workdir = tempfile.TemporaryDirectory(prefix="shoal-operator-")
        os.chmod(self._workdir.name, 0o700)
        self._http = httpx.AsyncClient(
            base_url=info.server,
            verify=_ssl_context(info, Path(self._workdir.name)),
            headers=info.as_http_headers(),
            timeout=30.0,
        )

    async def close(self) -> None:
        await self._http.aclose()
        self._workdir.cleanup()

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply ``obj`` as ``shoal-operator``; returns the live object."""
        response = await self._http.patch(
            object_path(obj),
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            headers={"Content-Type": "application/apply-patch+yaml"},
            json=obj,
        )
        return self._json(response)

    async def scale(self, namespace: str, deployment: str, replicas: int) -> None:
        """Sets a Deployment's replicas alone (a merge patch as ``shoal-operator``): the alert path's one write."""
        response = await self._http.patch(
            f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}",
            params={"fieldManager": FIELD_MANAGER},
            headers={"Content-Type": "application/merge-patch+json"},
            json={"spec": {"replicas": replicas}},
        )
        self._json(response)

    async def label_pod(self, namespace: str, name: str, labels: Mapping[str, str]) -> None:
        """Sets labels on one pod (a merge patch as ``shoal-operator``): the standby pool's moves."""
        response = await self._http.patch(
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            params={"fieldManager": FIELD_MANAGER},
            headers={"Content-Type": "application/merge-patch+json"},
            json={"metadata": {"labels": dict(labels)}},
        )
        self._json(response)

    async def patch_status(self, path: str, status: Mapping[str, Any]) -> None:
        """A JSON merge patch of an object's status subresource (``path`` is the object's)."""
        response = await self._http.patch(
            f"{path}/status", headers={"Content-Type": "application/merge-patch+json"}, json={"status": status}
        )
        self._json(response)

    async def event(self, obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        """Posts a core/v1 Event about ``obj`` (what ``kopf.event`` does inside a handler)."""
        meta = obj["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._json(await self._http.post(f"/api/v1/namespaces/{meta['namespace']}/events", json=event))

    async def create_once(self, obj: Mapping[str, Any]) -> bool:
        """Create ``obj`` unless it exists (never reading or changing an existing one); True when created."""
        response = await self._http.post(collection_path(obj), params={"fieldManager": FIELD_MANAGER}, json=obj)
        if response.status_code == 409:
            return False
        self._json(response)
        return True

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when it does not exist."""
        response = await self._http.get(path)
        if response.status_code == 404:
            return None
        return self._json(response)

    async def serves(self, group_version: str, plural: str) -> bool:
        """Whether the cluster serves ``plural`` in ``group_version`` (e.g. the Prometheus Operator's CRDs)."""
        listing = await self.get(f"/apis/{group_version}")
        return listing is not None and any(r.get("name") == plural for r in listing.get("resources", []))

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        if response.is_error:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise KubeError(response.status_code, message)
        return response.json()
