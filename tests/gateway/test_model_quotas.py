"""Quotas per model: a LoRA adapter (or a base model) capped for everyone, apart from the tenants' own quotas.

One engine serves the base model and two adapters; the tenants file caps one adapter. Its requests past the cap
get the 429 a tenant's quota gives, naming the adapter, while the base model and the other adapter pass; the
refusal gives back what the tenant's quota had charged for it. In memory, and shared by two gateways through a
real redis-server. Then through a real ``shoal serve`` with two adapters loaded and the official ``openai`` client.
"""

from __future__ import annotations

import uuid

import httpx
import openai
import pytest
from gateway_harness import EngineProcess

from shoal.gateway.auth import ApiKeys
from shoal.gateway.quota import Limits
from shoal.gateway.quota_redis import MODEL_PREFIX, RedisQuota

pytestmark = pytest.mark.timeout(120)

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


def test_a_real_engines_capped_adapter_is_refused_to_the_openai_client(gateways, tiny_model_dir, tmp_path) -> None:
    from lora_adapters import write_adapter  # tests/engine, on the path since tiny_model_dir

    modules = [
        f"{name}={write_adapter(tiny_model_dir, tmp_path / name, seed, r=4, target_modules=['q_proj', 'v_proj'])}"
        for seed, name in enumerate(("sql-lora", "chat-lora"))
    ]
    engine = EngineProcess(
        str(tiny_model_dir), tmp_path / "engine.log", "tiny", "--num-kv-blocks", "128", "--enable-lora",
        "--max-loras", "2", "--max-lora-rank", "4", "--lora-modules", *modules,
    ).wait_ready()  # fmt: skip
    try:
        keys = ApiKeys({"acme": (["sk-acme"], Limits())}, model_limits={"sql-lora": Limits(requests_per_minute=1)})
        handle = gateways([engine.url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)}, api_keys=keys)
        handle.wait_healthy(1)
        client = openai.OpenAI(base_url=handle.url + "/v1", api_key="sk-acme", max_retries=0, timeout=60)

        def complete(model: str) -> str:
            return client.completions.create(model=model, prompt="Once upon", max_tokens=3).model

        assert complete("sql-lora") == "sql-lora"
        with pytest.raises(openai.RateLimitError, match="Model `sql-lora` is over its requests_per_minute quota"):
            complete("sql-lora")
        assert [complete(model) for model in ("tiny", "chat-lora")] == ["tiny", "chat-lora"]
    finally:
        engine.stop()
