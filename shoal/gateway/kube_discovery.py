"""Replicas from the EndpointSlices of the engine Service, watched through the Kubernetes API.

Only endpoints whose ``conditions.ready`` is true count (a pod still loading its model or shutting down is
left out); the URL is ``http://<address>:<port>`` with the slice's port of the given name (or its only port), and
the slice's port named ``kv-events``, where there is one, is the engine's KV-event publisher (vLLM's).
The watch restarts from a fresh list whenever it ends, its resource version expires or its connection fails
in any way: a connection cut mid-stream surfaces as aiohttp errors that are not ``OSError`` (a payload cut
short, a server disconnected), and discovery that stopped on one would freeze the fleet for good.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio import client, config, watch

from shoal.gateway.discovery import KV_EVENTS_KEY, Backend, Discovery, Publish
from shoal.protocol.backoff import Backoff, Retry

log = logging.getLogger(__name__)

SERVICE_LABEL = "kubernetes.io/service-name"
RELIST = Backoff(initial_s=1.0, cap_s=30.0, jitter=0.2)  # a long apiserver outage is not polled every second


def slice_backends(endpoint_slice: Any, port_name: str | None) -> set[Backend]:
    """The ready endpoints of one EndpointSlice as backends."""
    slice_ports = endpoint_slice.ports or []
    ports = [p for p in slice_ports if (port_name is None and p.name != KV_EVENTS_KEY) or p.name == port_name]
    if not ports or ports[0].port is None:
        return set()
    port = ports[0].port
    events_port = next((p.port for p in slice_ports if p.name == KV_EVENTS_KEY), None)
    backends: set[Backend] = set()
    for endpoint in endpoint_slice.endpoints or []:
        conditions = endpoint.conditions
        if conditions is not None and conditions.ready is False:
            continue
        for address in endpoint.addresses or []:
            host = f"[{address}]" if ":" in address else address
            backends.add(Backend(f"http://{host}:{port}", events_port))
    return backends


async def _load_config(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    return client.ApiClient()


def endpoint_slices(
    namespace: str, service: str, port_name: str | None = None, kubeconfig: str | None = None, backoff: Backoff = RELIST
) -> Discovery:
    """Watches the slices labelled with ``service`` in ``namespace`` and publishes their ready backends."""

    async def run(publish: Publish) -> None:
        api_client = await _load_config(kubeconfig)
        api = client.DiscoveryV1Api(api_client)
        selector = f"{SERVICE_LABEL}={service}"
        retry = Retry(backoff)
        try:
            while True:
                try:
                    listing = await api.list_namespaced_endpoint_slice(namespace, label_selector=selector)
                    retry.succeeded()
                    slices = {s.metadata.name: slice_backends(s, port_name) for s in listing.items}
                    publish(sorted(set().union(*slices.values())))
                    stream = watch.Watch().stream(
                        api.list_namespaced_endpoint_slice,
                        namespace,
                        label_selector=selector,
                        resource_version=listing.metadata.resource_version,
                        timeout_seconds=300,
                    )
                    async for event in stream:
                        endpoint_slice = event["object"]
                        if event["type"] == "DELETED":
                            slices.pop(endpoint_slice.metadata.name, None)
                        else:
                            slices[endpoint_slice.metadata.name] = slice_backends(endpoint_slice, port_name)
                        publish(sorted(set().union(*slices.values())))
                except Exception as exc:  # noqa: BLE001 - any failure of one connection; the watch must go on
                    log.warning(
                        "EndpointSlice watch for %s/%s interrupted (%s: %s); listing again",
                        namespace,
                        service,
                        type(exc).__name__,
                        exc,
                    )
                    await retry.failed()
        finally:
            await api_client.close()

    return run
