"""The engine and the gateway serve ``/openapi.json``: the OpenAI routes they really serve, with the request
models they really enforce; the gateway's is public and, when it takes API keys, says so (bearer auth, 401).
Schemathesis loads each document from the running server (``support.fuzzing``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_harness import GatewayHandle, make_gateway
from schemathesis.core.result import Ok
from schemathesis.openapi import from_url
from support.fuzzing import fuzz

from shoal.gateway.auth import ApiKeys, Limits

pytestmark = pytest.mark.timeout(300)

OPERATIONS = [
    "POST /v1/completions",
    "POST /v1/chat/completions",
    "POST /v1/responses",
    "GET /v1/models",
    "POST /tokenize",
    "POST /detokenize",
    "GET /version",
]
KEY = "sk-openapi-reader"


@pytest.fixture(scope="module")
def keyed_gateway(targets: dict[str, str], tiny_model: Any) -> Iterator[str]:
    """A gateway with API keys in front of the shared engine."""
    handle = GatewayHandle(
        make_gateway(
            [targets["engine"]],
            byte_tokenized=(),
            tokenizers={"tiny": str(tiny_model)},
            api_keys=ApiKeys({"acme": ([KEY], Limits())}),
        )
    )
    try:
        handle.wait_healthy(1)
        yield handle.url
    finally:
        handle.stop()


def document(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/openapi.json", timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.parametrize("target", ["engine", "gateway"])
def test_the_served_document_lists_what_is_served(targets: dict[str, str], target: str) -> None:
    url = targets[target]
    schema = from_url(f"{url}/openapi.json")
    assert [op.ok().label for op in schema.get_all_operations() if isinstance(op, Ok)] == OPERATIONS
    assert "security" not in document(url), "no key is needed here, so none may be documented"
    completion = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(f"{url}/v1/completions", json=completion, timeout=60).status_code == 200
    assert httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60).status_code == 200
    assert httpx.get(f"{url}/v1/models", timeout=30).status_code == 200
    # the request schema is the one enforced: a field it does not declare is a 400 naming it
    declared = document(url)["components"]["schemas"]["CompletionRequest"]["properties"]
    assert "max_token" not in declared
    typo = httpx.post(f"{url}/v1/completions", json={**completion, "max_token": 2}, timeout=60)
    assert typo.status_code == 400 and "max_token" in typo.json()["error"]["message"]


def test_the_engine_serves_no_other_document(targets: dict[str, str]) -> None:
    for path in ("/docs", "/redoc", "/openapi.yaml"):
        assert httpx.get(targets["engine"] + path, timeout=30).status_code == 404, path


def test_a_gateway_with_keys_documents_bearer_auth_and_serves_the_document_to_anyone(keyed_gateway: str) -> None:
    served = document(keyed_gateway)  # no key sent: the document is public
    assert served["components"]["securitySchemes"] == {"apiKey": {"type": "http", "scheme": "bearer"}}
    assert served["security"] == [{"apiKey": []}]
    assert "401" in served["paths"]["/v1/models"]["get"]["responses"]
    assert httpx.get(f"{keyed_gateway}/v1/models", timeout=30).status_code == 401  # what the document says


def test_generated_requests_with_and_without_the_key_are_answered_as_documented(keyed_gateway: str) -> None:
    keyed = fuzz(keyed_gateway, examples=5, model="tiny", max_tokens=4, headers={"Authorization": f"Bearer {KEY}"})
    assert keyed.failures == [], keyed.failures[:5]
    valid = [answer for answer in keyed.answers if " positive " in answer]
    assert valid and not [answer for answer in valid if answer.endswith(" 401")], keyed.answers  # the key works
    keyless = fuzz(keyed_gateway, examples=3, model="tiny")
    assert keyless.failures == [], keyless.failures[:5]
    # as documented: every operation needs the key but /version
    assert {answer.rsplit(" ", 1)[1] for answer in keyless.answers if "/version" not in answer} == {"401"}
    assert {answer.rsplit(" ", 1)[1] for answer in keyless.answers if "/version" in answer} == {"200"}
