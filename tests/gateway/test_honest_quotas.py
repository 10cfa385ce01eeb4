"""Honest token quotas: charged at admission as an estimate that counts every sequence (``n`` per prompt), then
settled with what the engine reports it used when the request ends, in memory and in a real Redis alike."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.gateway.auth import ApiKeys
from shoal.gateway.quota import Limits, MemoryQuota, QuotaStore, admission_estimate, settlement, window_of
from shoal.gateway.quota_redis import RedisQuota
from shoal.model_registry import resolve_model
from shoal.protocol.responses_api import ResponsesRequest
from shoal.tokenizer import Tokenizer, responses_token_ids

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": "Bearer sk-acme"}
TPM = 300


@pytest.fixture(autouse=True)
def clear_of_the_window_edge() -> None:
    """Rate windows are clock minutes: start with enough of the minute left that it cannot roll over."""
    remaining = window_of(time.time())[1]
    if remaining < 15:
        time.sleep(remaining + 0.05)


def test_the_estimate_charges_a_whole_output_budget_per_sequence() -> None:
    assert admission_estimate(cost_tokens=105, output_tokens=100, sequences=1) == 105
    assert admission_estimate(cost_tokens=105, output_tokens=100, sequences=3) == 305


@given(
    charged_window=st.integers(0, 10**6),
    later=st.integers(0, 3),
    charged=st.integers(0, 10**5),
    used=st.integers(0, 10**5),
    offset=st.floats(0, 59.9),
)
def test_settlement_corrects_the_charge_in_its_window_and_never_refunds_a_past_one(
    charged_window: int, later: int, charged: int, used: int, offset: float
) -> None:
    now = (charged_window + later) * 60.0 + offset
    window, delta = settlement(charged_window, charged, used, now)
    assert window == window_of(now)[0]
    assert delta == (used - charged if later == 0 else max(used - charged, 0))


async def settles(store: QuotaStore, tenant: str) -> None:
    limits = Limits(tokens_per_minute=100)
    first = await store.admit(tenant, limits, 80)
    assert first.allowed
    assert not (await store.admit(tenant, limits, 80)).allowed  # the estimate holds while it runs
    await store.release(first, used_tokens=20)
    second = await store.admit(tenant, limits, 80)  # 20 used + 80 estimated: exactly the limit
    assert second.allowed
    assert (await store.admit(tenant, limits, 1)).limit == "tokens_per_minute"
    await store.release(second)  # no report (cancelled): the estimate stands
    assert (await store.admit(tenant, limits, 1)).limit == "tokens_per_minute"


async def test_memory_store_settles_with_the_usage() -> None:
    await settles(MemoryQuota(), "acme")


async def test_redis_store_settles_with_the_usage(redis_server) -> None:
    store = RedisQuota(redis_server.url, prefix=f"test:{uuid.uuid4().hex}")
    try:
        await settles(store, "acme")
    finally:
        await store.close()


def tenant_gateway(fake_engines, gateways, quota: QuotaStore | None = None):  # type: ignore[no-untyped-def]
    ((engine, server),) = fake_engines(1)
    keys = ApiKeys({"acme": (["sk-acme"], Limits(tokens_per_minute=TPM))})
    handle = gateways([server.url], api_keys=keys, quota=quota or MemoryQuota())
    handle.wait_healthy(1)
    return engine, handle


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_tenant_is_charged_what_it_used_not_what_it_asked_for(
    fake_engines, gateways, redis_server, store: str
) -> None:
    """ "hello" is 5 byte-tokens; max_tokens 200 makes each request's estimate 205, but the engine reports 5 used:
    settled, three requests fit in 300 tokens a minute (unsettled, the second would not)."""
    quota = RedisQuota(redis_server.url, prefix=f"test:{uuid.uuid4().hex}") if store == "redis" else None
    _, handle = tenant_gateway(fake_engines, gateways, quota)
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 200}
    for _ in range(3):
        assert httpx.post(handle.url + "/v1/completions", json=body, headers=AUTH).status_code == 200
    for _ in range(2):  # a stream the client did not ask usage for is settled too
        with httpx.stream(
            "POST", handle.url + "/v1/completions", json={**body, "stream": True}, headers=AUTH
        ) as response:
            assert response.status_code == 200
            events = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert not any('"usage"' in event for event in events)  # the gateway's own request for it is hidden
        assert events[-1] == "data: [DONE]"


def test_n_is_counted_at_admission(fake_engines, gateways) -> None:
    _, handle = tenant_gateway(fake_engines, gateways)
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 100}
    response = httpx.post(handle.url + "/v1/completions", json={**body, "n": 3}, headers=AUTH)
    assert response.status_code == 429  # 5 + 3 x 100 > 300
    assert response.json()["error"]["param"] == "tokens_per_minute"
    assert httpx.post(handle.url + "/v1/completions", json={**body, "n": 2}, headers=AUTH).status_code == 200


def test_a_client_that_asks_for_usage_still_gets_it(fake_engines, gateways) -> None:
    _, handle = tenant_gateway(fake_engines, gateways)
    body = {
        "model": "tiny",
        "prompt": "hello",
        "max_tokens": 200,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", handle.url + "/v1/completions", json=body, headers=AUTH) as response:
        reports = [json.loads(line[6:]) for line in response.iter_lines() if '"usage"' in line]
    assert [r["usage"]["total_tokens"] for r in reports] == [5]


def test_real_engine_streams_keep_their_shape(engines, tiny_model_dir, gateways) -> None:
    """Through a real engine: no usage chunk unless asked for, and the one asked for is the engine's."""
    handle = gateways([engines[0].url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
    handle.wait_healthy(1)
    api = openai.OpenAI(base_url=handle.url + "/v1", api_key="none", max_retries=0, timeout=60)
    request = {
        "model": "tiny",
        "prompt": "Once upon a time",
        "max_tokens": 6,
        "stream": True,
        "extra_body": {"ignore_eos": True},
    }
    plain = list(api.completions.create(**request))
    assert plain and all(chunk.usage is None for chunk in plain)
    asked = list(api.completions.create(**request, stream_options={"include_usage": True}))
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 6


def test_responses_are_settled_whole_and_streamed(engines, tiny_model_dir, gateways) -> None:
    """A Responses stream always ends with its usage (in ``response.completed``): with a one-word format and a
    budget of 100 output tokens, three requests fit in a minute only if the first two were settled."""
    body: dict[str, Any] = {
        "model": "tiny",
        "input": "hi",
        "max_output_tokens": 100,
        "text": {"format": {"type": "json_schema", "name": "one", "schema": {"type": "string", "enum": ["a"]}}},
    }
    prompt = len(
        responses_token_ids(Tokenizer.from_source(resolve_model(str(tiny_model_dir))), ResponsesRequest(**body))
    )
    budget = (prompt + 100) + 2 * (prompt + 10)
    assert 2 * (prompt + 100) > budget  # unsettled, the second estimate alone would not fit next to the first
    keys = ApiKeys({"acme": (["sk-acme"], Limits(tokens_per_minute=budget))})
    handle = gateways([engines[0].url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)}, api_keys=keys)
    handle.wait_healthy(1)
    client = openai.OpenAI(base_url=handle.url + "/v1", api_key="sk-acme", max_retries=0, timeout=60)
    first = client.responses.create(**body)
    assert first.usage is not None and first.usage.output_tokens <= 10, first.usage
    events = list(client.responses.create(**body, stream=True))
    assert events[-1].type == "response.completed"
    assert client.responses.create(**body).status == "completed"
