"""Quotas per model: a LoRA adapter (or a base model) capped for everyone, apart from the tenants' own quotas.

One engine serves the base model and two adapters; the tenants file caps one adapter. Its requests past the cap
get the 429 a tenant's quota gives, naming the adapter, while the base model and the other adapter pass; the
refusal gives back what the tenant's quota had charged for it. In memory, and shared by two gateways through a
real redis-server.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from shoal.gateway.auth import ApiKeys
from shoal.gateway.quota import Limits
from shoal.gateway.quota_redis import MODEL_PREFIX, RedisQuota

pytestmark = pytest.mark.timeout(60)

MODELS = ("tiny", "sql-lora", "chat-lora")
KEY = {"Authorization": "Bearer sk-acme"}


def _post(url: str, model: str, max_tokens: int = 4) -> httpx.Response:
    body = {"model": model, "prompt": "x", "max_tokens": max_tokens}
    return httpx.post(url + "/v1/completions", json=body, headers=KEY)


def test_a_capped_adapter_gets_429_naming_it_while_the_base_model_and_another_adapter_pass(
    fake_engines, gateways
) -> None:
    ((_, server),) = fake_engines(1, models=MODELS)
    keys = ApiKeys(
        {"acme": (["sk-acme"], Limits(max_concurrent=1))}, model_limits={"sql-lora": Limits(requests_per_minute=2)}
    )
    handle = gateways([server.url], byte_tokenized=MODELS, api_keys=keys)
    handle.wait_healthy(1)

    assert [_post(handle.url, "sql-lora").status_code for _ in range(2)] == [200, 200]
    refused = _post(handle.url, "sql-lora")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["message"] == "Model `sql-lora` is over its requests_per_minute quota; retry later."
    assert (error["type"], error["param"], error["code"]) == (
        "rate_limit_error",
        "requests_per_minute",
        "rate_limit_exceeded",
    )
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    # the tenant's one concurrent slot came back with the refusal: the others still pass
    assert [_post(handle.url, model).status_code for model in ("tiny", "chat-lora", "tiny")] == [200, 200, 200]
    metrics = httpx.get(handle.url + "/metrics").text
    assert 'shoal_gateway_model_quota_rejections_total{limit="requests_per_minute",model="sql-lora"} 1.0' in metrics
    assert "shoal_gateway_quota_rejections_total{" not in metrics  # no tenant was over its own quota


def test_a_model_refusal_gives_the_tenant_its_tokens_back(fake_engines, gateways) -> None:
    """The tenant's tokens per minute fit two estimates of ~27 tokens, not three; the adapter's cap refuses two
    requests before the engine sees them, and their estimates are not left on the tenant's bill."""
    ((engine, server),) = fake_engines(1, models=MODELS)
    keys = ApiKeys(
        {"acme": (["sk-acme"], Limits(tokens_per_minute=60))}, model_limits={"sql-lora": Limits(max_concurrent=0)}
    )
    handle = gateways([server.url], byte_tokenized=MODELS, api_keys=keys)
    handle.wait_healthy(1)
    assert [_post(handle.url, "sql-lora", 25).status_code for _ in range(2)] == [429] * 2
    assert _post(handle.url, "tiny", 25).status_code == 200
    assert [request["body"]["model"] for request in engine.requests] == ["tiny"]


def test_two_gateways_share_one_adapter_quota_through_redis(fake_engines, gateways, redis_server) -> None:
    ((_, server),) = fake_engines(1, models=MODELS)
    keys = ApiKeys(
        {"acme": (["sk-acme"], Limits()), "beta": (["sk-beta"], Limits())},
        model_limits={"sql-lora": Limits(requests_per_minute=3)},
    )
    prefix = f"test:{uuid.uuid4().hex}"
    pair = [
        gateways(
            [server.url],
            byte_tokenized=MODELS,
            api_keys=keys,
            quota=RedisQuota(redis_server.url, prefix=prefix),
            model_quota=RedisQuota(redis_server.url, prefix=f"{prefix}:{MODEL_PREFIX}"),
        )
        for _ in range(2)
    ]
    for handle in pair:
        handle.wait_healthy(1)
    statuses = [_post(pair[i % 2].url, "sql-lora").status_code for i in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    beta = httpx.post(
        pair[0].url + "/v1/completions",
        json={"model": "sql-lora", "prompt": "x"},
        headers={"Authorization": "Bearer sk-beta"},
    )
    assert beta.status_code == 429, "the adapter's quota is everyone's"
    assert _post(pair[1].url, "chat-lora").status_code == 200
