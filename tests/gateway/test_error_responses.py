"""Bad requests and bad backends get a clear status and an OpenAI error body; the gateway keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest

from shoal.gateway.auth import ApiKeys
from shoal.gateway.quota import Limits

pytestmark = pytest.mark.timeout(60)

KEYS = ApiKeys({"acme": (["sk-acme"], Limits()), "tiny-co": (["sk-tiny"], Limits(requests_per_minute=2))})
COMPLETION = {"model": "tiny", "prompt": "hello there", "max_tokens": 4}


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def serves(url: str, key: str = "sk-acme") -> bool:
    response = httpx.post(url + "/v1/completions", json=COMPLETION, headers={"Authorization": f"Bearer {key}"})
    return response.status_code == 200 and response.json()["choices"][0]["text"]


@pytest.fixture
def gateway(fake_engines, gateways):
    ((engine, server),) = fake_engines(1)
    handle = gateways([server.url], api_keys=KEYS, max_body_bytes=64 * 1024)
    handle.wait_healthy(1)
    return handle, engine


def test_missing_or_wrong_key_is_401_and_openai_raises_authentication_error(gateway) -> None:
    handle, _ = gateway
    response = httpx.post(handle.url + "/v1/completions", json=COMPLETION)
    assert response.status_code == 401 and error_of(response)["code"] == "invalid_api_key"
    client = openai.OpenAI(base_url=handle.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.completions.create(**COMPLETION)
    assert serves(handle.url)


def test_unknown_model_is_404_naming_it(gateway) -> None:
    handle, _ = gateway
    client = openai.OpenAI(base_url=handle.url + "/v1", api_key="sk-acme", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="no-such-model"):
        client.completions.create(model="no-such-model", prompt="hi")
    assert serves(handle.url)


@pytest.mark.parametrize(
    ("body", "param_or_message"),
    [
        (b'{"model": "tiny", "prompt": ', "Malformed JSON"),
        (b'["not", "an", "object"]', "JSON object"),
        (b'{"model": "tiny", "prompt": "x", "max_tokens": "many"}', "max_tokens"),
        (b'{"model": "tiny", "prompt": "x", "max_token": 3}', "max_token"),
        (b'{"model": "tiny", "prompt": "\xff\xfe"}', "Malformed JSON"),
        (b'{"model": "tiny", "prompt": "x", "user": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", "nested too deeply"),
    ],
)
def test_malformed_bodies_are_400_naming_the_problem(gateway, body: bytes, param_or_message: str) -> None:
    handle, engine = gateway
    response = httpx.post(
        handle.url + "/v1/completions",
        content=body,
        headers={"Authorization": "Bearer sk-acme", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert param_or_message in error_of(response)["message"]
    assert engine.requests == []  # never forwarded
    assert serves(handle.url)


def test_oversized_body_is_413_before_it_is_read_whole(gateway) -> None:
    handle, engine = gateway
    huge = {"model": "tiny", "prompt": "x" * (200 * 1024)}
    response = httpx.post(handle.url + "/v1/completions", json=huge, headers={"Authorization": "Bearer sk-acme"})
    assert response.status_code == 413 and error_of(response)["code"] == "request_too_large"

    def chunks():
        yield b'{"model": "tiny", "prompt": "'
        for _ in range(100):
            yield b"y" * 4096
        yield b'"}'

    chunked = httpx.post(
        handle.url + "/v1/completions",
        content=chunks(),
        headers={"Authorization": "Bearer sk-acme", "Content-Type": "application/json"},
    )
    assert chunked.status_code == 413
    assert engine.requests == []
    assert serves(handle.url)


def test_tenant_over_quota_gets_429_with_retry_after_and_others_are_unaffected(gateway) -> None:
    handle, _ = gateway
    assert serves(handle.url, "sk-tiny") and serves(handle.url, "sk-tiny")
    response = httpx.post(handle.url + "/v1/completions", json=COMPLETION, headers={"Authorization": "Bearer sk-tiny"})
    assert response.status_code == 429
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert error_of(response)["param"] == "requests_per_minute"
    assert serves(handle.url, "sk-acme")
    metrics = httpx.get(handle.url + "/metrics").text
    assert 'shoal_gateway_quota_rejections_total{limit="requests_per_minute",tenant="tiny-co"} 1.0' in metrics


def test_every_backend_down_is_503_with_retry_after(fake_engines, gateways) -> None:
    ((_, server),) = fake_engines(1)
    handle = gateways([server.url])
    handle.wait_healthy(1)
    server.stop()
    for _ in range(2):  # the first attempt finds the refused connection, the second no replica at all
        response = httpx.post(handle.url + "/v1/completions", json=COMPLETION)
        assert response.status_code == 503
        assert int(response.headers["Retry-After"]) >= 1
        assert "tiny" in error_of(response)["message"]


def test_a_backend_answering_503_is_retried_elsewhere_and_passed_on_when_all_do(fake_engines, gateways) -> None:
    (busy, busy_server), (calm, calm_server) = fake_engines(2)
    handle = gateways([busy_server.url, calm_server.url], policy="round-robin")
    handle.wait_healthy(2)
    busy.mode = "unavailable"
    for _ in range(4):
        assert serves(handle.url)
    assert calm.completed == 4
    calm.mode = "unavailable"
    response = httpx.post(handle.url + "/v1/completions", json=COMPLETION)
    assert response.status_code == 503 and response.headers["Retry-After"] == "3"


def test_garbage_from_a_backend_is_a_502_and_the_gateway_keeps_serving(gateway) -> None:
    handle, engine = gateway
    engine.mode = "garbage"
    response = httpx.post(handle.url + "/v1/completions", json=COMPLETION, headers={"Authorization": "Bearer sk-acme"})
    assert response.status_code == 502 and error_of(response)["code"] == "bad_gateway"
    engine.mode = "ok"
    assert serves(handle.url)
    metrics = httpx.get(handle.url + "/metrics").text
    assert 'shoal_gateway_requests_total{model="tiny",status="502",tenant="acme"} 1.0' in metrics


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/completions", 405),
        ("PUT", "/v1/chat/completions", 405),
        ("POST", "/v1/embeddings", 404),
    ],
)
def test_unknown_routes_and_methods_get_an_openai_error_body(gateway, method: str, path: str, status: int) -> None:
    handle, _ = gateway
    response = httpx.request(method, handle.url + path, headers={"Authorization": "Bearer sk-acme"})
    assert response.status_code == status
    assert path in error_of(response)["message"]
    if status == 405:
        assert response.headers["allow"] == "POST"
    assert serves(handle.url)
