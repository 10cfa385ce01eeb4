"""Through the gateway, in front of real engines, with the official client: the gateway validates with the
engine's models, so what the engine accepts passes (logit_bias, echo, max_completion_tokens, ignored fields),
what it refuses is refused with the same 400, and ``/tokenize``, ``/detokenize`` reach a replica of the model;
the prompt tokens the gateway routes by are the engine's, whatever the new fields."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from gateway_harness import GatewayHandle
from support.polling import eventually

import shoal
from shoal.gateway.prompts import PromptReader
from shoal.model_registry import resolve_model
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest
from shoal.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(240)
GREEDY: dict[str, Any] = {"temperature": 0, "extra_body": {"ignore_eos": True}}
CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture
def gateway(engines, tiny_model_dir, gateways) -> GatewayHandle:
    handle = gateways([engines[0].url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
    handle.wait_healthy(1)
    eventually(lambda: handle.gateway.prompts.tokenizer("tiny") is not None, 30, "the tokenizer")
    return handle


def test_new_fields_pass_through_the_gateway(gateway: GatewayHandle, tiny_model_dir) -> None:
    api = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    tokenizer = Tokenizer.from_source(resolve_model(str(tiny_model_dir)))
    forced = tokenizer.encode(" river", add_special_tokens=False)[0]
    out = api.completions.create(
        model="tiny", prompt="Once", max_tokens=3, echo=True, logit_bias={str(forced): 100}, user="u-1", **GREEDY
    )
    assert out.choices[0].text == "Once" + tokenizer.decode([forced] * 3)
    chat = api.chat.completions.create(
        model="tiny", messages=CHAT, max_completion_tokens=2, store=True, metadata={"a": "b"}, **GREEDY
    )  # type: ignore[call-overload]
    assert chat.usage.completion_tokens == 2
    with pytest.raises(openai.BadRequestError) as refused:
        api.chat.completions.create(model="tiny", messages=CHAT, extra_body={"echo": True})  # type: ignore[arg-type]
    assert refused.value.body["param"] == "echo"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as unknown:
        api.completions.create(model="tiny", prompt="x", extra_body={"frobnicate": 1})
    assert unknown.value.body["param"] == "frobnicate"  # type: ignore[index]


def test_tokenize_and_detokenize_pass_through(gateway: GatewayHandle, engines) -> None:
    via = httpx.post(f"{gateway.url}/tokenize", json={"model": "tiny", "prompt": "A river"}, timeout=30).json()
    direct = httpx.post(f"{engines[0].url}/tokenize", json={"model": "tiny", "prompt": "A river"}, timeout=30).json()
    assert via == direct
    unnamed = httpx.post(f"{gateway.url}/tokenize", json={"messages": CHAT}, timeout=30)  # the only model served
    assert unnamed.status_code == 200 and unnamed.json()["count"] > 0
    text = httpx.post(f"{gateway.url}/detokenize", json={"model": "tiny", "tokens": via["tokens"]}, timeout=30)
    assert "A river" in text.json()["prompt"]
    missing = httpx.post(f"{gateway.url}/tokenize", json={"model": "gpt-17", "prompt": "x"}, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"
    bad = httpx.post(f"{gateway.url}/detokenize", json={"model": "tiny", "tokens": [10**6]}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"  # the engine's answer, passed on
    assert httpx.get(f"{gateway.url}/version", timeout=30).json() == {"version": shoal.__version__}


def test_new_fields_leave_the_prompt_tokens_alone(tiny_model_dir) -> None:
    """The gateway's half of the prompt contract: echo, logit_bias and ignored fields do not change the prompt."""
    reader = PromptReader()
    reader.add("tiny", Tokenizer.from_source(resolve_model(str(tiny_model_dir))))
    plain = CompletionRequest(model="tiny", prompt="A river runs")
    echoed = CompletionRequest(model="tiny", prompt="A river runs", echo=True, logit_bias={"5": 3}, user="u")
    assert reader.read(echoed).token_ids == reader.read(plain).token_ids
    chat = ChatCompletionRequest(model="tiny", messages=CHAT, max_tokens=4)  # type: ignore[arg-type]
    renamed = ChatCompletionRequest(model="tiny", messages=CHAT, max_completion_tokens=4, store=True)  # type: ignore[arg-type]
    assert reader.read(renamed) == reader.read(chat)


def test_a_lenient_gateway_drops_unknown_fields_for_a_strict_engine(engines, tiny_model_dir, gateways) -> None:
    """``--ignore-unknown-fields`` on the gateway alone: the engine behind it (strict) gets the body without them."""
    handle = gateways(
        [engines[0].url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)}, ignore_unknown_fields=True
    )
    handle.wait_healthy(1)
    body = {"model": "tiny", "prompt": "x", "max_tokens": 1, "frobnicate": 1}
    assert httpx.post(f"{handle.url}/v1/completions", json=body, timeout=30).status_code == 200
    assert httpx.post(f"{engines[0].url}/v1/completions", json=body, timeout=30).status_code == 400
    tokenized = httpx.post(f"{handle.url}/tokenize", json={"model": "tiny", "prompt": "x", "extra": 2}, timeout=30)
    assert tokenized.status_code == 200 and tokenized.json()["count"] >= 1
    chat = {"model": "tiny", "messages": CHAT, "echo": True}
    assert httpx.post(f"{handle.url}/v1/chat/completions", json=chat, timeout=30).json()["error"]["param"] == "echo"
