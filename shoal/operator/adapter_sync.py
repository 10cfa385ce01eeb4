"""The operator's run-time adapter loading for kind shoal: each pass brings every Ready, not-terminating engine
pod to ``spec.adapters`` through its own endpoints, and says what each pod serves.

Per pod: ``GET /v1/models``, then the calls :func:`~shoal.operator.adapter_plan.plan` decides, one after the
other (the engine loads one adapter at a time anyway); the pods in parallel. The HTTP is bounded (a read of the
models list ``timeout_s``, a load, which may fetch an hf:// or s3:// adapter, ``load_timeout_s``) and runs in a
task of its own per fleet, never two at once: a pass starts one (when none is running) and waits for it at most
``wait_s``, then reports what the last finished sync saw, so a slow fetch delays no pass and no other fleet. An
engine's 4xx to a load is its refusal (the message names the adapter and why), retried on the next sync like any
missing adapter; a pod that cannot be asked is left as it is (nothing known loaded) until the next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from shoal.operator.adapter_plan import PodAdapters, after, plan, served_adapters
from shoal.operator.naming import ENGINE_PORT

FleetKey = tuple[str, str]  # (namespace, name)
Observed = Mapping[str, PodAdapters]  # pod name -> what it serves


def _ready_pods(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Pod name -> engine URL, for the Ready, not-terminating pods with an address."""
    urls = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
        if ready and not meta.get("deletionTimestamp") and status.get("podIP"):
            urls[str(meta.get("name"))] = f"http://{status['podIP']}:{ENGINE_PORT}"
    return urls


def _reason(response: httpx.Response) -> str:
    """The engine's words from an OpenAI error body, else the body itself."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text.strip() or f"HTTP {response.status_code}"


class AdapterSync:
    """One sync task per fleet at a time, and the last thing each fleet's sync saw."""

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = 2.0,
        load_timeout_s: float = 120.0,
        wait_s: float = 3.0,
    ) -> None:
        self.client = client or httpx.AsyncClient()
        self.timeout_s, self.load_timeout_s, self.wait_s = timeout_s, load_timeout_s, wait_s
        self._tasks: dict[FleetKey, asyncio.Task[None]] = {}
        self._observed: dict[FleetKey, Observed] = {}

    async def observe(
        self,
        key: FleetKey,
        pods: Sequence[Mapping[str, Any]],
        wanted: Sequence[tuple[str, str]],
        served_name: str,
        sync: bool = True,
    ) -> Observed:
        """Starts a sync of the fleet's ready pods to ``wanted`` (name, source) unless one is running, waits for it
        up to ``wait_s``, and returns what the last finished one saw of the pods still ready; ``sync`` false (an
        alert's pass, which must be quick) only returns that."""
        task = self._tasks.get(key)
        if sync and (task is None or task.done()):
            urls = _ready_pods(pods)
            task = asyncio.create_task(self._sync(key, urls, tuple(wanted), served_name))
            self._tasks[key] = task
        if sync and task is not None:
            await asyncio.wait({task}, timeout=self.wait_s)
        ready = _ready_pods(pods)
        return {name: seen for name, seen in self._observed.get(key, {}).items() if name in ready}

    async def _sync(
        self, key: FleetKey, urls: Mapping[str, str], wanted: tuple[tuple[str, str], ...], served_name: str
    ) -> None:
        results = await asyncio.gather(*(self._sync_pod(url, wanted, served_name) for url in urls.values()))
        self._observed[key] = dict(zip(urls, results, strict=True))

    async def _sync_pod(self, url: str, wanted: tuple[tuple[str, str], ...], served_name: str) -> PodAdapters:
        try:
            response = await self.client.get(f"{url}/v1/models", timeout=self.timeout_s)
            response.raise_for_status()
            served = served_adapters(response.json().get("data", []), served_name)
        except (httpx.HTTPError, ValueError, AttributeError) as error:
            return PodAdapters(error=f"GET {url}/v1/models: {error!r}")
        calls = plan(wanted, served)
        loaded, unloaded, refused = [], [], {}
        for name, source in calls.load:
            body = {"lora_name": name, "lora_path": source}
            answer = await self._post(f"{url}/v1/load_lora_adapter", body, self.load_timeout_s)
            if answer is not None and answer.is_success:
                loaded.append(name)
            elif answer is not None and 400 <= answer.status_code < 500:
                refused[name] = _reason(answer)
        for name in calls.unload:
            answer = await self._post(f"{url}/v1/unload_lora_adapter", {"lora_name": name}, self.timeout_s)
            if answer is not None and (answer.is_success or answer.status_code == 404):
                unloaded.append(name)  # 404: gone already; a 400 (requests in flight) is tried again next time
        return PodAdapters(loaded=after(served, loaded, unloaded), refused=refused)

    async def _post(self, url: str, body: dict[str, str], timeout_s: float) -> httpx.Response | None:
        """The engine's answer, or None when there was none in time (the call is tried again next sync)."""
        try:
            return await self.client.post(url, json=body, timeout=timeout_s)
        except httpx.HTTPError:
            return None

    def forget(self, key: FleetKey) -> None:
        """The fleet is gone (or no longer loads at run time): stop its sync, drop what it saw."""
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
        self._observed.pop(key, None)

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.client.aclose()
