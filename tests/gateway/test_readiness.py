"""``/ready``: a gateway takes traffic only once a replica serves and its configured tokenizers are loaded."""

from __future__ import annotations

import threading

import httpx
import pytest
from gateway_harness import ByteTokenizer
from support.polling import eventually

from shoal.engine_kinds import adapter
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


def test_a_backend_of_another_engine_kind_is_checked_on_its_own_health_path(fake_engines, gateways) -> None:
    """A stand-in for vLLM or llama-server: ``/health`` answers, ``/ready`` does not exist. Checked on the kind's
    path (``--engine-kind vllm``) it serves; checked on Shoal's ``/ready`` it would never be healthy."""
    ((engine, server),) = fake_engines(1)
    engine.ready_route = False
    shoal_checked = gateways([server.url])
    kind_checked = gateways([server.url], ready_path=adapter("vllm").ready_path, kv_events=None)
    kind_checked.wait_healthy(1)
    assert httpx.get(kind_checked.url + "/ready").json()["ready"] is True
    assert httpx.get(shoal_checked.url + "/ready").status_code == 503
    engine.ready = False  # the engine turns unhealthy: ejected after its failed checks
    eventually(lambda: not any(r.healthy for r in kind_checked.gateway.fleet.replicas.values()), 10, "ejected")
