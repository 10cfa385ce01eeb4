"""Discovery from the engine Service's EndpointSlices, watched on a real kube-apiserver.

Slices are written by hand (no controller runs here); the addresses are never contacted, only published.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes_asyncio import client, config
from support.cuttable_relay import CuttableRelay

from shoal.gateway.discovery import Backend
from shoal.gateway.kube_discovery import SERVICE_LABEL, endpoint_slices
from shoal.protocol.backoff import Backoff

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]


def endpoint_slice(
    name: str, service: str, endpoints: dict[str, bool], port: int = 8000, kv_events_port: int | None = None
) -> client.V1EndpointSlice:
    ports = [client.DiscoveryV1EndpointPort(name="http", port=port, protocol="TCP")]
    if kv_events_port is not None:  # a vLLM engine's KV-event publisher, as the operator's Service names it
        ports.append(client.DiscoveryV1EndpointPort(name="kv-events", port=kv_events_port, protocol="TCP"))
    return client.V1EndpointSlice(
        metadata=client.V1ObjectMeta(name=name, labels={SERVICE_LABEL: service}),
        address_type="IPv4",
        ports=ports,
        endpoints=[
            client.V1Endpoint(addresses=[ip], conditions=client.V1EndpointConditions(ready=ready))
            for ip, ready in endpoints.items()
        ],
    )


async def test_ready_endpoints_of_the_service_are_published_as_they_change(kube_apiserver) -> None:
    await config.load_kube_config(config_file=str(kube_apiserver.kubeconfig))
    api_client = client.ApiClient()
    api = client.DiscoveryV1Api(api_client)
    published: list[list[str]] = []
    changed = asyncio.Event()

    def publish(backends: list[Backend]) -> None:
        published.append([backend.line() for backend in backends])
        changed.set()

    async def next_set(expected: list[str]) -> None:
        while not published or published[-1] != expected:
            changed.clear()
            await asyncio.wait_for(changed.wait(), 20)

    namespace = "default"
    await api.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("engines-a", "engines", {"10.1.0.1": True, "10.1.0.2": False})
    )
    await api.create_namespaced_endpoint_slice(namespace, endpoint_slice("other-a", "other", {"10.9.0.1": True}))
    task = asyncio.create_task(endpoint_slices(namespace, "engines", "http", str(kube_apiserver.kubeconfig))(publish))
    try:
        await next_set(["http://10.1.0.1:8000"])
        await api.create_namespaced_endpoint_slice(
            namespace, endpoint_slice("engines-b", "engines", {"10.1.0.3": True}, port=9000, kv_events_port=5557)
        )
        await next_set(["http://10.1.0.1:8000", "http://10.1.0.3:9000 kv-events=5557"])
        await api.replace_namespaced_endpoint_slice(
            "engines-a", namespace, endpoint_slice("engines-a", "engines", {"10.1.0.1": False, "10.1.0.2": True})
        )
        await next_set(["http://10.1.0.2:8000", "http://10.1.0.3:9000 kv-events=5557"])
        await api.delete_namespaced_endpoint_slice("engines-b", namespace)
        await next_set(["http://10.1.0.2:8000"])
        assert all("10.9.0.1" not in url for urls in published for url in urls)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for name in ("engines-a", "other-a"):
            with contextlib.suppress(client.ApiException):
                await api.delete_namespaced_endpoint_slice(name, namespace)
        await api_client.close()


async def test_a_watch_cut_mid_stream_is_resumed(kube_apiserver, tmp_path) -> None:
    """A connection broken under the watch raises aiohttp errors that are not ``OSError`` (a payload cut short,
    a server gone): discovery must list and watch again instead of ending for good."""
    await config.load_kube_config(config_file=str(kube_apiserver.kubeconfig))
    api_client = client.ApiClient()
    api = client.DiscoveryV1Api(api_client)
    relay = await CuttableRelay("127.0.0.1", urlsplit(kube_apiserver.url).port).start()
    kubeconfig = yaml.safe_load(kube_apiserver.kubeconfig.read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    relayed = tmp_path / "kubeconfig-relayed"
    relayed.write_text(yaml.safe_dump(kubeconfig))
    published: list[list[str]] = []
    namespace = "default"
    await api.create_namespaced_endpoint_slice(namespace, endpoint_slice("cut-a", "cut", {"10.2.0.1": True}))
    task = asyncio.create_task(
        endpoint_slices(namespace, "cut", "http", str(relayed), Backoff(0.1, 1.0))(
            lambda backends: published.append([b.url for b in backends])
        )
    )

    async def published_eventually(expected: list[str]) -> None:
        for _ in range(200):
            if published and published[-1] == expected:
                return
            assert not task.done(), f"discovery ended: {task.exception()!r}"
            await asyncio.sleep(0.1)
        raise AssertionError(f"never published {expected}; last {published[-1:]}")

    try:
        await published_eventually(["http://10.2.0.1:8000"])
        await api.create_namespaced_endpoint_slice(namespace, endpoint_slice("cut-b", "cut", {"10.2.0.2": True}))
        await published_eventually(["http://10.2.0.1:8000", "http://10.2.0.2:8000"])  # the watch is streaming
        assert relay.cut() >= 1
        await api.delete_namespaced_endpoint_slice("cut-b", namespace)
        await published_eventually(["http://10.2.0.1:8000"])
        assert relay.connections >= 2  # it came back through a new connection
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await relay.stop()
        for name in ("cut-a", "cut-b"):
            with contextlib.suppress(client.ApiException):
                await api.delete_namespaced_endpoint_slice(name, namespace)
        await api_client.close()
