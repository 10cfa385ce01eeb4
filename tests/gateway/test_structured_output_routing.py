"""Structured-output requests through the gateway to real engines: validated by the same models, routed on the same
prompt tokens (the constraint changes the output, never the prompt), constrained by the engine."""

from __future__ import annotations

from typing import Literal

import openai
import pytest
from gateway_harness import GatewayHandle
from pydantic import BaseModel, Field
from support.polling import eventually

from shoal.protocol.openai_api import ChatCompletionRequest

pytestmark = pytest.mark.timeout(240)
MESSAGES = [{"role": "user", "content": "Describe a pet as JSON."}]


class Pet(BaseModel):
    name: str = Field(max_length=8)
    kind: Literal["cat", "dog", "fish"]


@pytest.fixture
def gateway(engines, tiny_model_dir, gateways) -> GatewayHandle:
    handle = gateways([e.url for e in engines[:2]], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
    handle.wait_healthy(2)
    eventually(lambda: handle.gateway.prompts.tokenizer("tiny") is not None, 30, "the tokenizer")
    return handle


def test_structured_requests_route_on_their_prompt_and_come_back_constrained(gateway: GatewayHandle) -> None:
    api = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    constrained = {"guided_choice": ["a", "b"], "response_format": None}
    plain = gateway.gateway.prompts.read(ChatCompletionRequest(model="tiny", messages=MESSAGES))  # type: ignore[arg-type]
    guided = gateway.gateway.prompts.read(
        ChatCompletionRequest.model_validate({"model": "tiny", "messages": MESSAGES, **constrained})
    )
    assert guided.token_ids == plain.token_ids and plain.token_ids
    for seed in range(3):
        out = api.chat.completions.parse(
            model="tiny", messages=MESSAGES, response_format=Pet, seed=seed, temperature=1.0, max_tokens=80
        )  # type: ignore[call-overload]
        assert isinstance(out.choices[0].message.parsed, Pet)
        assert out.usage.prompt_tokens == len(plain.token_ids)
        with api.chat.completions.stream(
            model="tiny", messages=MESSAGES, response_format=Pet, seed=seed, temperature=1.0, max_tokens=80
        ) as stream:  # type: ignore[call-overload]
            assert isinstance(stream.get_final_completion().choices[0].message.parsed, Pet)
    with pytest.raises(openai.BadRequestError) as refused:  # the engine's compile error, passed on
        api.chat.completions.create(model="tiny", messages=MESSAGES, extra_body={"guided_regex": "a("})
    assert refused.value.body["param"] == "guided_regex"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as refused:  # the gateway's own validation
        api.chat.completions.create(model="tiny", messages=MESSAGES, extra_body={"guided_regex": "a", **constrained})
    assert refused.value.body["param"] == "guided_choice"  # type: ignore[index]
