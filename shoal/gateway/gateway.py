"""One gateway's state and background work: the fleet, its discovery, health checks and KV-event followers.

``Gateway`` is what the HTTP app and the CLI share. ``start()`` opens the request path's pool of keep-alive
upstream connections (``upstream``), an aiohttp session for the health checks and KV-event streams, and starts
three kinds of tasks: discovery publishing the set of replicas,
a health loop that checks every replica each ``health_interval``, and one KV-event follower per replica (started
when the replica appears, cancelled when it goes): Shoal's ``/kv/events`` (``kv_follower``), or vLLM's ZMQ
publisher where discovery names its port (``vllm_kv_follower``). Routing decisions are made per request by the
model's policy over the healthy replicas serving that model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from shoal.engine_kinds import KVEventsForm
from shoal.gateway import block_size, health, kv_follower, vllm_kv_follower
from shoal.gateway.auth import ApiKeys
from shoal.gateway.discovery import Backend, Discovery
from shoal.gateway.hold_queue import HoldQueue
from shoal.gateway.metrics import GatewayMetrics
from shoal.gateway.prompts import PromptReader
from shoal.gateway.quota import MemoryQuota, QuotaStore
from shoal.gateway.replicas import Fleet, Replica
from shoal.gateway.response_homes import ResponseHomes
from shoal.gateway.routing import DEFAULT_BOUND_FACTOR, DEFAULT_LOAD_FLOOR_TOKENS, RoutingPolicy, make_policy
from shoal.gateway.upstream import UpstreamPool
from shoal.protocol.block_hash import DEFAULT_BLOCK_SIZE
from shoal.protocol.gateway_timeouts import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_FIRST_TOKEN_TIMEOUT_S,
    DEFAULT_INTER_TOKEN_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
)

log = logging.getLogger(__name__)


@dataclass
class GatewayConfig:
    policy: str = "prefix-aware"
    bound_factor: float = DEFAULT_BOUND_FACTOR
    load_floor_tokens: int = DEFAULT_LOAD_FLOOR_TOKENS
    block_size: int = DEFAULT_BLOCK_SIZE
    tokenizers: dict[str, str] = field(default_factory=dict)  # served model name -> tokenizer source
    max_body_bytes: int = 4 * 1024 * 1024
    ignore_unknown_fields: bool = False  # as the engine's flag: drop (and log) fields OpenAI does not define
    max_attempts: int = 3
    retry_budget_s: float = 10.0
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S  # the request's time limits: shoal.gateway.timeouts
    first_token_timeout_s: float = DEFAULT_FIRST_TOKEN_TIMEOUT_S
    inter_token_timeout_s: float = DEFAULT_INTER_TOKEN_TIMEOUT_S
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    health_interval_s: float = 2.0
    health_timeout_s: float = 2.0
    fail_threshold: int = 2
    unavailable_retry_after_s: int = 2
    kv_events: KVEventsForm | None = "sse"  # how the engines publish their caches (the kind's); None: history alone
    ready_path: str = "/ready"  # the engine kind's readiness path (shoal.engine_kinds)
    validate_fields: bool = True  # every field as Shoal's engine would; else only routing's (another kind judges)
    hold_queue_size: int = 0  # requests held while a model has no ready replica; 0 answers 503 at once
    hold_seconds: float = 60.0


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        discovery: Discovery,
        api_keys: ApiKeys | None = None,
        quota: QuotaStore | None = None,
        prompts: PromptReader | None = None,
        model_quota: QuotaStore | None = None,
    ) -> None:
        self.config = config
        self.discovery = discovery
        self.api_keys = api_keys or ApiKeys()
        self.quota = quota or MemoryQuota()  # tenants' counters
        self.model_quota = model_quota or MemoryQuota()  # models' counters (api_keys.model_limits), kept apart
        self.prompts = prompts or PromptReader(config.tokenizers)
        self.metrics = GatewayMetrics()
        self.fleet = Fleet()
        self.response_homes = ResponseHomes()
        self.hold = HoldQueue(
            config.hold_queue_size, config.hold_seconds, config.unavailable_retry_after_s, self.metrics.held
        )
        self.session: aiohttp.ClientSession | None = None
        self.upstreams: UpstreamPool | None = None
        self._policies: dict[str, RoutingPolicy] = {}
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._block_size_shown: dict[str, int] = {}  # replica -> its mismatched block size (0: none), as shown
        self._tasks: set[asyncio.Task[None]] = set()

    def policy(self, model: str) -> RoutingPolicy:
        """Each model has its own policy instance (a round-robin counter per model, for one)."""
        if model not in self._policies:
            self._policies[model] = make_policy(
                self.config.policy, self.config.bound_factor, self.config.load_floor_tokens
            )
        return self._policies[model]

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=75, ttl_dns_cache=None)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        self.upstreams = UpstreamPool(self.config.connect_timeout_s)
        self.prompts.preload()
        self._spawn(self._discover())
        self._spawn(self._health_loop())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._followers.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._followers.clear()
        if self.session is not None:
            await self.session.close()
        if self.upstreams is not None:
            self.upstreams.close()
        await self.quota.close()
        await self.model_quota.close()

    async def _discover(self) -> None:
        await self.discovery(self.publish)

    def publish(self, backends: list[Backend]) -> None:
        """Discovery's callback: the complete current set of replicas."""
        added, removed = self.fleet.set_backends(backends)
        for replica in removed:
            log.info("replica %s removed by discovery", replica.url)
            for gauge in (self.metrics.backend_up, self.metrics.kv_synced, self.metrics.block_size_mismatch):
                with contextlib.suppress(KeyError):
                    gauge.remove(replica.url)
            self._block_size_shown.pop(replica.url, None)
            task = self._followers.pop(replica.url, None)
            if task is not None:
                task.cancel()
        for replica in added:
            log.info("replica %s discovered", replica.url)
            self._spawn(self._check(replica))
            follower = self._follower(replica)
            if follower is not None:
                self.metrics.kv_synced.labels(replica.url).set(0)  # until its first snapshot
                self._followers[replica.url] = asyncio.create_task(follower)

    def _follower(self, replica: Replica) -> Coroutine[Any, Any, None] | None:
        """What follows this replica's cache: the kind's form of KV events, where the replica publishes them."""
        if self.config.kv_events == "sse":
            assert self.session is not None
            return kv_follower.follow(self.session, replica, self._on_sync)
        if self.config.kv_events == "zmq" and replica.kv_events_port is not None:
            return vllm_kv_follower.follow(replica, self._on_sync)
        return None

    def _on_sync(self, replica: Replica, synced: bool) -> None:
        self.metrics.kv_synced.labels(replica.url).set(1 if synced else 0)
        self._note_block_size(replica)

    def _note_block_size(self, replica: Replica) -> None:
        """Shows the block size a replica announces, and says so (once per change) if it is not the expected."""
        if replica.block_size is None:
            return
        wrong = block_size.mismatch(replica.block_size, self.config.block_size)
        shown = replica.block_size if wrong else 0
        if wrong and self._block_size_shown.get(replica.url) != shown:
            log.warning(
                "replica %s announces %d-token KV blocks, the gateway expects %d (--block-size)",
                replica.url,
                replica.block_size,
                self.config.block_size,
            )
        self._block_size_shown[replica.url] = shown
        self.metrics.block_size_mismatch.labels(replica.url).set(shown)

    async def _check(self, replica: Replica) -> None:
        assert self.session is not None
        await health.check(
            self.session,
            self.fleet,
            replica,
            self.config.health_timeout_s,
            self.config.fail_threshold,
            self.config.ready_path,
        )
        self.metrics.backend_up.labels(replica.url).set(1 if replica.healthy else 0)
        self._note_block_size(replica)
        if replica.healthy:
            self.hold.release(lambda model: bool(self.fleet.candidates(model)))

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            await asyncio.gather(*(self._check(r) for r in list(self.fleet.replicas.values())))

    def eject(self, replica: Replica) -> None:
        Fleet.eject(replica)
        self.metrics.backend_up.labels(replica.url).set(0)
