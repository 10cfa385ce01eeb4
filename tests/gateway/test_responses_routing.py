"""``/v1/responses`` through the gateway to real engines: validated by the engine's models (a bad request never
reaches a replica), routed on the tokens the engine will see (the conversation ``instructions`` and ``input`` stand
for, rendered by the same chat template), and passed back whole or as the Responses event stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from gateway_harness import EngineProcess, GatewayHandle
from support.polling import eventually
from support.tool_schemas import TIME

from shoal.gateway.response_homes import ResponseHomes
from shoal.protocol.responses_api import ResponsesRequest

pytestmark = pytest.mark.timeout(240)
INSTRUCTIONS = ("You are the assistant of the Shoal inference fleet. Answer briefly and politely. " * 4).strip()
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"kind": {"type": "string", "enum": ["cat", "dog"]}, "age": {"type": "integer", "maximum": 20}},
    "required": ["kind", "age"],
    "additionalProperties": False,
}


@pytest.fixture
def gateway(engines, tiny_model_dir, gateways) -> GatewayHandle:
    handle = gateways([e.url for e in engines[:2]], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
    handle.wait_healthy(2)
    eventually(lambda: handle.gateway.prompts.tokenizer("tiny") is not None, 30, "the tokenizer")
    return handle


@pytest.fixture(scope="module")
def tools_engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One engine serving a tiny random Qwen2 with Qwen2.5's tool template, which renders tools, calls and their
    results (the tiny Llama's refuses a ``tool`` message)."""
    from tiny_checkpoints import QWEN_TOOLS_CHAT_TEMPLATE, build_checkpoint  # on the path with tiny_model_dir

    model = build_checkpoint(
        tmp_path_factory.mktemp("gateway-qwen-tools"),
        "qwen2",
        seed=3,
        chat_template=QWEN_TOOLS_CHAT_TEMPLATE,
        max_position_embeddings=2048,
    )
    log = tmp_path_factory.mktemp("tools-engine-log") / "engine.log"
    engine = EngineProcess(str(model), log, "tiny-qwen", "--num-kv-blocks", "256")
    try:
        yield engine.wait_ready().url, model
    finally:
        engine.stop()


def api(handle: GatewayHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_responses_route_on_the_engines_prompt_tokens_whole_and_streamed(gateway: GatewayHandle) -> None:
    client = api(gateway)
    request: dict[str, Any] = {
        "model": "tiny",
        "instructions": INSTRUCTIONS,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Explain backpressure."}]}],
        "max_output_tokens": 5,
    }
    routed = gateway.gateway.prompts.read(ResponsesRequest.model_validate(request))
    assert routed.token_ids and routed.output_tokens == 5
    whole = client.responses.create(**request)
    assert whole.usage is not None and whole.usage.input_tokens == len(routed.token_ids)
    assert whole.output_text and whole.status in ("completed", "incomplete")
    events = list(client.responses.create(**request, stream=True))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.input_tokens == len(routed.token_ids)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text  # type: ignore[union-attr]
    # the same long instructions again: the prefix-aware policy sends it where they are cached
    again = client.responses.create(**request)
    assert again.usage is not None and again.usage.input_tokens_details.cached_tokens > 0


def test_a_function_call_and_its_output_route_on_the_engines_prompt_tokens(
    tools_engine: tuple[str, Path], gateways
) -> None:
    """A required call through the gateway, whole and streamed, routed on the prompt its tools are rendered into;
    the call and its output sent back are routed on the conversation the engine renders of them."""
    url, model = tools_engine
    gateway = gateways([url], byte_tokenized=(), tokenizers={"tiny-qwen": str(model)})
    gateway.wait_healthy(1)
    eventually(lambda: gateway.gateway.prompts.tokenizer("tiny-qwen") is not None, 30, "the tokenizer")
    client = api(gateway)
    tools: list[Any] = [{"type": "function", "name": "get_time", "parameters": TIME}]
    question = {"role": "user", "content": "What time is it?"}
    request: dict[str, Any] = {
        "model": "tiny-qwen",
        "input": [question],
        "tools": tools,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 60,
    }
    routed = gateway.gateway.prompts.read(ResponsesRequest.model_validate(request))
    without_tools = gateway.gateway.prompts.read(
        ResponsesRequest.model_validate(request | {"tools": None, "tool_choice": None})
    )
    assert len(without_tools.token_ids or []) < len(routed.token_ids or [])  # the tools are in the prompt
    whole = client.responses.create(**request)
    assert whole.usage is not None and whole.usage.input_tokens == len(routed.token_ids or [])
    (call,) = whole.output
    assert call.type == "function_call" and call.name == "get_time"
    jsonschema.validate(json.loads(call.arguments), TIME)
    events = list(client.responses.create(**request, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output[0].type == "function_call"  # type: ignore[union-attr]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "12:00"}
    back = request | {"input": [question, call.model_dump(exclude_none=True), result], "tool_choice": "none"}
    routed_back = gateway.gateway.prompts.read(ResponsesRequest.model_validate(back))
    answered = client.responses.create(**back)
    assert answered.usage is not None and answered.usage.input_tokens == len(routed_back.token_ids or [])
    assert answered.output[0].type == "message"


def test_a_json_schema_format_comes_back_valid_through_the_gateway(gateway: GatewayHandle) -> None:
    client = api(gateway)
    text: Any = {"format": {"type": "json_schema", "name": "pet", "schema": SCHEMA, "strict": True}}
    for _ in range(3):
        with client.responses.stream(model="tiny", input="A pet.", text=text, max_output_tokens=40) as stream:
            final = stream.get_final_response()
        jsonschema.validate(json.loads(final.output_text), SCHEMA)


def test_a_follow_up_is_routed_to_the_replica_that_stored_the_response(engines, tiny_model_dir, gateways) -> None:
    """Two replicas (the third is killed by test_real_engines); each follow-up continues a response only the
    replica that answered it holds."""
    handle = gateways([e.url for e in engines[:2]], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
    handle.wait_healthy(2)
    client = api(handle)
    for i in range(8):
        first = client.responses.create(model="tiny", input=f"Conversation {i}: hello.", max_output_tokens=3)
        follow_up = client.responses.create(
            model="tiny", previous_response_id=first.id, input="And then?", max_output_tokens=3, stream=True
        )
        assert list(follow_up)[-1].type in ("response.completed", "response.incomplete")
    forgotten = ResponseHomes(max_entries=1)
    forgotten.record("resp_a", "http://a")
    forgotten.record("resp_b", "http://b")
    assert forgotten.home("resp_a") is None and forgotten.home("resp_b") == "http://b"


def test_bad_input_is_refused_by_the_gateway_before_any_replica(fake_engines, gateways) -> None:
    """The FakeEngine has no ``/v1/responses``: each 400 here is the gateway's own validation."""
    ((engine, server),) = fake_engines(1)
    handle = gateways([server.url])
    handle.wait_healthy(1)
    client = api(handle)
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "hi", "tool_choice": {"type": "function", "name": "f"}}, "tool_choice"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation"),
        ({"input": "hi", "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format"),
    ]
    for body, param in refusals:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="tiny", **body)
        assert refused.value.body["param"] == param  # type: ignore[index]
    assert engine.requests == []
