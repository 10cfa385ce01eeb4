"""``/ready``: a gateway takes traffic only once a replica serves and its configured tokenizers are loaded."""

from __future__ import annotations

import threading

import httpx
import pytest
from gateway_harness import ByteTokenizer
from support.polling import eventually

from shoal.gateway import prompts

pytestmark = pytest.mark.timeout(60)


def test_not_ready_without_a_serving_replica_then_ready(fake_engines, gateways) -> None:
    ((engine, server),) = fake_engines(1)
    engine.ready = False
    handle = gateways([server.url])
    response = httpx.get(handle.url + "/ready")
    assert response.status_code == 503 and response.json()["ready"] is False
    engine.ready = True
    handle.wait_healthy(1)
    assert httpx.get(handle.url + "/ready").json() == {"ready": True, "models": ["tiny"], "tokenizers_loading": []}


def test_not_ready_while_a_configured_tokenizer_loads(fake_engines, gateways, monkeypatch) -> None:
    release = threading.Event()

    def slow_load(source: str) -> ByteTokenizer:
        release.wait(30)
        return ByteTokenizer()

    monkeypatch.setattr(prompts, "_load_tokenizer", slow_load)
    ((_, server),) = fake_engines(1, models=("big",))
    handle = gateways([server.url], byte_tokenized=(), tokenizers={"big": "some/tokenizer"})
    handle.wait_healthy(1)
    response = httpx.get(handle.url + "/ready")
    assert response.status_code == 503
    assert response.json()["tokenizers_loading"] == ["big"]
    assert httpx.post(handle.url + "/v1/completions", json={"model": "big", "prompt": "x"}).status_code == 200
    release.set()
    eventually(lambda: httpx.get(handle.url + "/ready").status_code == 200, 10, "ready once the tokenizer loaded")
    assert handle.gateway.prompts.tokenizer("big") is not None
