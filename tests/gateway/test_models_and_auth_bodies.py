"""The gateway's ``/v1/models`` is the engine's model list type, and its 401 is one body on every route."""

from __future__ import annotations

import httpx
import openai
import pytest

from shoal.gateway.auth import ApiKeys
from shoal.gateway.quota import Limits
from shoal.protocol.errors import invalid_api_key
from shoal.protocol.openai_api import ModelList

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def keyed_gateway(fake_engines, gateways) -> str:
    engines = fake_engines(1, models=("beta",)) + fake_engines(1, models=("alpha",))  # listed out of order
    handle = gateways([server.url for _, server in engines], api_keys=ApiKeys({"acme": (["sk-acme"], Limits())}))
    handle.wait_healthy(2)
    return handle.url


def test_models_are_the_engines_model_list_sorted(keyed_gateway: str) -> None:
    response = httpx.get(keyed_gateway + "/v1/models", headers={"Authorization": "Bearer sk-acme"})
    assert response.status_code == 200
    listed = ModelList.model_validate(response.json())
    assert [card.id for card in listed.data] == ["alpha", "beta"]
    assert all(card.object == "model" and card.owned_by == "shoal" for card in listed.data)
    client = openai.OpenAI(base_url=keyed_gateway + "/v1", api_key="sk-acme", max_retries=0)
    assert [model.id for model in client.models.list()] == ["alpha", "beta"]


@pytest.mark.parametrize("authorization", [None, "Bearer sk-wrong", "sk-acme"], ids=["missing", "wrong", "no-bearer"])
def test_every_route_refuses_a_bad_key_with_the_same_401_body(keyed_gateway: str, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    models = httpx.get(keyed_gateway + "/v1/models", headers=headers)
    completion = httpx.post(keyed_gateway + "/v1/completions", json={"model": "alpha", "prompt": "hi"}, headers=headers)
    assert models.status_code == completion.status_code == 401
    assert models.json() == completion.json() == invalid_api_key().body()
    assert "sk-" not in models.text
