"""Tools through the gateway to a real engine: validated by the same models, routed on the same prompt tokens (the
tools rendered into the prompt by the checkpoint's template, on both sides), the calls constrained and parsed by
the engine and relayed unchanged, streamed or not."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from gateway_harness import EngineProcess, GatewayHandle
from support.polling import eventually

from shoal.gateway.prompts import PromptReader
from shoal.protocol.openai_api import ChatCompletionRequest

pytestmark = pytest.mark.timeout(300)
MODEL = "tiny-qwen"
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What time is it in Paris?"}]
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}, "hours": {"type": "integer", "maximum": 12}},
    "required": ["zone", "hours"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {"name": "get_time", "parameters": TIME}}]


@pytest.fixture(scope="module")
def tools_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(Path(__file__).parent.parent / "engine"))
    from tiny_checkpoints import QWEN_TOOLS_CHAT_TEMPLATE, build_checkpoint

    return build_checkpoint(
        tmp_path_factory.mktemp("gateway-tiny-qwen"),
        "qwen2",
        seed=5,
        chat_template=QWEN_TOOLS_CHAT_TEMPLATE,
        max_position_embeddings=2048,
    )


@pytest.fixture(scope="module")
def tools_engine(tools_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    log = tmp_path_factory.mktemp("tools-engine") / "engine.log"
    engine = EngineProcess(str(tools_model), log, MODEL, "--enable-auto-tool-choice", "--num-kv-blocks", "256")
    try:
        engine.wait_ready()
        yield engine
    finally:
        engine.stop()


@pytest.fixture
def gateway(tools_engine: EngineProcess, tools_model: Path, gateways: Any) -> GatewayHandle:
    handle = gateways([tools_engine.url], byte_tokenized=(), tokenizers={MODEL: str(tools_model)})
    handle.wait_healthy(1)
    eventually(lambda: handle.gateway.prompts.tokenizer(MODEL) is not None, 30, "the tokenizer")
    return handle


def test_tool_requests_route_on_the_prompt_the_engine_renders(gateway: GatewayHandle) -> None:
    api = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "required"}
    routed = gateway.gateway.prompts.read(ChatCompletionRequest.model_validate(body))
    plain = gateway.gateway.prompts.read(ChatCompletionRequest.model_validate({"model": MODEL, "messages": MESSAGES}))
    assert routed.token_ids and plain.token_ids and len(routed.token_ids) > len(plain.token_ids)  # the tools are in it
    for seed in range(3):
        out = api.chat.completions.create(**body, parallel_tool_calls=False, seed=seed, temperature=1.0, max_tokens=80)  # type: ignore[call-overload]
        assert out.usage.prompt_tokens == len(routed.token_ids)  # type: ignore[union-attr]
        (call,) = out.choices[0].message.tool_calls or []
        assert call.function.name == "get_time" and out.choices[0].finish_reason == "tool_calls"
        jsonschema.validate(json.loads(call.function.arguments), TIME)
    named = {"type": "function", "function": {"name": "get_time"}}
    chunks = list(
        api.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=named, max_tokens=80, stream=True
        )  # type: ignore[call-overload]
    )
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert deltas[0].id and deltas[0].function.name == "get_time"  # type: ignore[union-attr]
    jsonschema.validate(json.loads("".join(d.function.arguments or "" for d in deltas)), TIME)  # type: ignore[union-attr]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_a_round_trip_through_the_gateway(gateway: GatewayHandle) -> None:
    api = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    called = api.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=80
    )  # type: ignore[call-overload]
    message = called.choices[0].message
    (call,) = message.tool_calls or []
    conversation = [
        *MESSAGES,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "12:00"},
    ]
    answer = api.chat.completions.create(model=MODEL, messages=conversation, tools=TOOLS, max_tokens=6)  # type: ignore[arg-type]
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")  # auto: the model's choice
    routed = gateway.gateway.prompts.read(
        ChatCompletionRequest.model_validate({"model": MODEL, "messages": conversation, "tools": TOOLS})
    )
    assert answer.usage.prompt_tokens == len(routed.token_ids or [])  # type: ignore[union-attr]


def test_the_gateway_refuses_what_the_engine_would(gateway: GatewayHandle) -> None:
    api = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    bad_schema = [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]
    for kwargs, param in [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": bad_schema}, "tools[0].function.parameters"),
        ({"tool_choice": "none"}, "tool_choice"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, **kwargs)  # type: ignore[call-overload]
        assert refused.value.body["param"] == param  # type: ignore[index]


def test_without_a_tokenizer_the_estimate_counts_the_tools() -> None:
    """A model whose tokenizer cannot be loaded is charged an estimate from the text, the tools included."""
    reader = PromptReader({"lost": "/nonexistent/model"})
    bodies = [{"model": "lost", "messages": MESSAGES}, {"model": "lost", "messages": MESSAGES, "tools": TOOLS}]
    plain, with_tools = (reader.read(ChatCompletionRequest.model_validate(b)) for b in bodies)
    assert plain.token_ids is None and with_tools.token_ids is None
    assert with_tools.cost_tokens > plain.cost_tokens
