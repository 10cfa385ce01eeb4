"""Quotas shared by several gateway replicas through Redis.

One Lua script checks and charges all three limits atomically, so two gateways admitting at the same instant
cannot both take the last slot. Window counters expire on their own; concurrency is a sorted set of leases
scored by their expiry, so the slots of a gateway that died mid-request come back after ``lease_ttl``. The rule
is the same as ``shoal.gateway.quota.decide`` (settlement included); the tests hold both stores to it. If Redis
cannot be reached the gateway fails open by default (admits unmetered): an outage of the quota store need not
become an outage of the fleet; ``fail_open=False`` refuses instead (503). Either way the outage is logged once
when it starts and once when it ends, and counted (``shoal_gateway_quota_store_errors_total``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from shoal.gateway.quota import WINDOW_SECONDS, Admission, LimitName, Limits, rejection, settlement, window_of

log = logging.getLogger(__name__)
TENANT_PREFIX = "shoal:quota"
MODEL_PREFIX = "shoal:model-quota"  # a model's counters, apart from any tenant's whatever the names

_ADMIT = """
local now = tonumber(ARGV[1])
local rpm = tonumber(ARGV[2])
local tpm = tonumber(ARGV[3])
local conc = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local concurrent = redis.call('ZCARD', KEYS[3])
local requests = tonumber(redis.call('GET', KEYS[1]) or '0')
local tokens = tonumber(redis.call('GET', KEYS[2]) or '0')
if conc >= 0 and concurrent + 1 > conc then return {0, 'max_concurrent'} end
if rpm >= 0 and requests + 1 > rpm then return {0, 'requests_per_minute'} end
if tpm >= 0 and tokens + cost > tpm then return {0, 'tokens_per_minute'} end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('INCRBY', KEYS[2], cost)
redis.call('EXPIRE', KEYS[2], ARGV[7])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[8]), ARGV[6])
return {1, ''}
"""

_SETTLE = """
local tokens = tonumber(redis.call('GET', KEYS[1]) or '0') + tonumber(ARGV[1])
if tokens < 0 then tokens = 0 end
redis.call('SET', KEYS[1], tokens, 'EX', ARGV[2])
"""


def _arg(limit: int | None) -> int:
    return -1 if limit is None else limit


class RedisQuota:
    """Counters in Redis under ``{prefix}:{tenant}:...`` (a model's, in the model store, under its name)."""

    def __init__(
        self,
        url: str,
        prefix: str = TENANT_PREFIX,
        lease_ttl: float = 900.0,
        fail_open: bool = True,
        timeout_s: float = 1.0,
    ) -> None:
        self._redis = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._prefix = prefix
        self._lease_ttl = lease_ttl
        self.fail_open = fail_open
        self.reachable = True
        self._script = self._redis.register_script(_ADMIT)
        self._settle = self._redis.register_script(_SETTLE)

    def _tokens_key(self, tenant: str, window: int) -> str:
        return f"{self._prefix}:{tenant}:{window}:tokens"

    def _failed(self, exc: RedisError) -> None:
        if self.reachable:
            log.warning(
                "quota store unreachable (%s); %s",
                exc,
                "admitting requests unmetered" if self.fail_open else "refusing requests (fail closed)",
            )
        self.reachable = False

    def _succeeded(self) -> None:
        if not self.reachable:
            log.warning("quota store reachable again; metering requests")
        self.reachable = True

    def _concurrency_key(self, tenant: str) -> str:
        return f"{self._prefix}:{tenant}:leases"

    async def admit(self, tenant: str, limits: Limits, cost_tokens: int) -> Admission:
        now = time.time()
        window, _ = window_of(now)
        lease_id = uuid.uuid4().hex
        keys = [
            f"{self._prefix}:{tenant}:{window}:requests",
            self._tokens_key(tenant, window),
            self._concurrency_key(tenant),
        ]
        args: list[float | int | str] = [
            now,
            _arg(limits.requests_per_minute),
            _arg(limits.tokens_per_minute),
            _arg(limits.max_concurrent),
            cost_tokens,
            lease_id,
            int(2 * WINDOW_SECONDS),
            self._lease_ttl,
        ]
        try:
            allowed, limit = await self._script(keys=keys, args=args)
        except RedisError as exc:
            self._failed(exc)
            if self.fail_open:
                return Admission(True, tenant=tenant, unmetered=True)
            return Admission(False, "quota_store_unavailable", retry_after=1.0, tenant=tenant, unmetered=True)
        self._succeeded()
        if allowed:
            return Admission(True, lease_id=lease_id, tenant=tenant, window=window, tokens=cost_tokens)
        name = cast(LimitName, limit.decode() if isinstance(limit, bytes) else limit)  # the script returns a LimitName
        return rejection(name, now)

    async def release(self, admission: Admission, used_tokens: int | None = None) -> None:
        if not (admission.allowed and admission.lease_id):
            return
        try:
            await self._redis.zrem(self._concurrency_key(admission.tenant), admission.lease_id)
            if used_tokens is not None:
                window, delta = settlement(admission.window, admission.tokens, used_tokens, time.time())
                if delta:
                    await self._settle(
                        keys=[self._tokens_key(admission.tenant, window)], args=[delta, int(2 * WINDOW_SECONDS)]
                    )
        except RedisError as exc:  # the lease expires on its own; the estimate stands
            self._failed(exc)

    async def close(self) -> None:
        await self._redis.aclose()
