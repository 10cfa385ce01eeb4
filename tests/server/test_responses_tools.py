"""Function tools in ``/v1/responses``: the official openai client against a real ``shoal serve`` of the random-weight
Qwen2 with Qwen2.5's tool template (``tests/server/test_tool_calls_client.py`` has the chat side).

A random model follows no instruction, so a ``required`` or named call that parses and validates is the constrained
decoding's doing. The calls come back as ``function_call`` output items, whole and as OpenAI's events; they go back
as ``function_call`` and ``function_call_output`` input items, or through ``previous_response_id``, into the same
prompt chat renders. Text before a call (which only ``auto`` lets a model write) is shown on the formatter itself,
fed the deltas a hermes model would produce.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from serve_harness import TINY_MODEL_NAME, TOOLS_MODEL_NAME, ServeProcess
from support.tool_schemas import SCHEMAS, TIME, WEATHER

from shoal.engine.core.outputs import RequestMetrics
from shoal.engine.server import responses
from shoal.engine.server.output_stream import Delta
from shoal.engine.server.response_store import ResponseStore
from shoal.engine.server.serving import Outcome
from shoal.engine.tool_parsers import ToolParserSettings
from shoal.gateway.prompts import PromptReader
from shoal.model_registry import resolve_model
from shoal.protocol.openai_api import ChatCompletionRequest
from shoal.protocol.responses_api import ResponsesRequest
from shoal.tokenizer import Tokenizer, chat_token_ids

pytestmark = pytest.mark.timeout(300)
M = TOOLS_MODEL_NAME
QUESTION = "What is the weather in Paris?"
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "description": "Weather", "parameters": WEATHER, "strict": True},
    {"type": "function", "name": "get_time", "parameters": TIME},
]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS]
NAMED = {"type": "function", "name": "get_time"}
CALL_EVENTS = ["response.output_item.added", "response.function_call_arguments.done", "response.output_item.done"]


@pytest.fixture
def api(tools_server: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{tools_server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _check_calls(output: list[Any], names: set[str]) -> None:
    """Every item is a completed function call, named among ``names``, whose arguments validate."""
    assert output and all(item.type == "function_call" for item in output), output
    for item in output:
        assert item.id.startswith("fc_") and item.call_id.startswith("call_") and item.status == "completed"
        assert item.name in names
        jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])
    assert len({item.call_id for item in output}) == len({item.id for item in output}) == len(output)


def _chat_messages(calls: list[Any], results: list[str]) -> list[dict[str, Any]]:
    """The conversation of a call and its results as a chat request states it."""
    tool_calls = [
        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
    ]
    return [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": tool_calls},
        *({"role": "tool", "tool_call_id": c.call_id, "content": r} for c, r in zip(calls, results, strict=True)),
    ]


@pytest.mark.parametrize(("tool_choice", "names"), [("required", set(SCHEMAS)), (NAMED, {"get_time"})])
def test_a_required_or_named_call_is_a_function_call_item_whole_and_streamed(
    api: openai.OpenAI, tool_choice: Any, names: set[str]
) -> None:
    kwargs: dict[str, Any] = dict(
        model=M, input=QUESTION, tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=False, max_output_tokens=120
    )
    for temperature in (1.0, 1.0, 0.0):
        whole = api.responses.create(temperature=temperature, **kwargs)
        assert whole.status == "completed" and len(whole.output) == 1
        _check_calls(whole.output, names)
    named = whole.tool_choice if isinstance(tool_choice, str) else whole.tool_choice.name  # type: ignore[union-attr]
    assert named == (tool_choice if isinstance(tool_choice, str) else "get_time")
    assert [t.name for t in whole.tools] == ["get_weather", "get_time"]  # type: ignore[union-attr]
    events = list(api.responses.create(temperature=0.0, stream=True, **kwargs))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events if e.type != "response.function_call_arguments.delta"]
    assert kinds == ["response.created", "response.in_progress", *CALL_EVENTS, "response.completed"]
    added = events[2].item  # type: ignore[union-attr]
    assert added.type == "function_call" and added.status == "in_progress" and added.name in names
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")  # type: ignore[union-attr]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    final = events[-1].response.output  # type: ignore[union-attr]
    assert deltas == done.arguments == final[0].arguments == whole.output[0].arguments  # type: ignore[union-attr]
    assert final[0].call_id == added.call_id and done.item_id == added.id == final[0].id  # type: ignore[union-attr]
    with api.responses.stream(temperature=0.0, **kwargs) as stream:  # the SDK's own reading of the events
        helper = stream.get_final_response()
    assert [(c.name, c.arguments) for c in helper.output] == [(c.name, c.arguments) for c in whole.output]  # type: ignore[union-attr]


def test_parallel_required_calls_are_an_item_each(api: openai.OpenAI) -> None:
    """With parallel calls a random model may call until the limit: every item but a last cut one validates."""
    out = api.responses.create(model=M, input=QUESTION, tools=TOOLS, tool_choice="required", max_output_tokens=150)
    cut = out.status == "incomplete"
    _check_calls(out.output[:-1] if cut else out.output, set(SCHEMAS))
    assert not cut or out.output[-1].status == "incomplete"  # type: ignore[union-attr]


def test_a_round_trip_and_its_continuation_render_what_chat_renders(
    api: openai.OpenAI, tools_server: ServeProcess
) -> None:
    """call -> function_call_output -> answer, sent whole and continued by previous_response_id: both prompts are
    the chat of the same call and result, with the tools, token for token."""
    called = api.responses.create(
        model=M, input=QUESTION, tools=TOOLS, tool_choice="required", temperature=0.0, max_output_tokens=120
    )
    calls = [item for item in called.output if item.type == "function_call"]
    results = [json.dumps({"ok": c.name}) for c in calls]
    outputs = [
        {"type": "function_call_output", "call_id": c.call_id, "output": r} for c, r in zip(calls, results, strict=True)
    ]
    sent_back: list[Any] = [{"role": "user", "content": QUESTION}, *called.output, *outputs]
    answered = api.responses.create(model=M, input=sent_back, tools=TOOLS, tool_choice="none", max_output_tokens=4)
    assert answered.output[0].type == "message" and len(answered.output) == 1
    chat = {"model": M, "messages": _chat_messages(calls, results), "tools": CHAT_TOOLS}
    count = httpx.post(f"{tools_server.url}/tokenize", json=chat, timeout=30).json()["count"]
    assert answered.usage is not None and answered.usage.input_tokens == count
    continued = api.responses.create(
        model=M, previous_response_id=called.id, input=outputs, tools=TOOLS, tool_choice="none", max_output_tokens=4
    )  # type: ignore[arg-type]
    assert continued.usage is not None and continued.usage.input_tokens == count
    streamed_call = list(
        api.responses.create(model=M, input=QUESTION, tools=TOOLS, tool_choice=NAMED, max_output_tokens=60, stream=True)  # type: ignore[arg-type]
    )[-1].response  # type: ignore[union-attr]
    after_stream = api.responses.create(
        model=M,
        previous_response_id=streamed_call.id,
        input=[{"type": "function_call_output", "call_id": streamed_call.output[0].call_id, "output": "12:00"}],
        max_output_tokens=4,
    )  # type: ignore[union-attr]
    chat_after = _chat_messages(streamed_call.output, ["12:00"])
    count_after = httpx.post(f"{tools_server.url}/tokenize", json={"model": M, "messages": chat_after}, timeout=30)
    assert after_stream.usage is not None and after_stream.usage.input_tokens == count_after.json()["count"]


def test_the_stored_calls_keep_the_ids_the_client_was_given(tools_model_dir: Path) -> None:
    """The stream names each call as it goes; what is stored for ``previous_response_id`` names it alike, so a
    ``function_call_output`` answers the call the template shows (Mistral's even checks the ids). Also text before
    a call (hermes, under ``auto``): a message item first, then the call, whole and streamed."""
    tokenizer = Tokenizer.from_source(resolve_model(str(tools_model_dir)))
    store = ResponseStore()
    endpoint = responses.Endpoint(store, ToolParserSettings(enable_auto_tool_choice=True))
    req = ResponsesRequest.model_validate({"model": M, "input": QUESTION, "tools": TOOLS})
    prepared = asyncio.run(endpoint.prepare(req, "r1", tokenizer, 4096))
    written = ["Let me", " check.<tool", '_call>\n{"name": "get_time", "arg', 'uments": {"zone": "CET"}}\n</tool_call>']
    formatter = endpoint.Formatter(tokenizer, prepared)
    outcome = Outcome(prepared)
    stream = formatter.opening(outcome)
    for i, text in enumerate(written):
        last = i == len(written) - 1
        delta = Delta(0, [i], text, None, last, "stop" if last else None, None, 5, 0, i + 1, RequestMetrics(0.0))
        stream += formatter.chunk(delta, outcome.update(delta))
    stream += formatter.closing(outcome)
    events = [json.loads(line[len("data: ") :]) for line in stream.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events if not e["type"].endswith(".delta")]
    message_events = ["response.content_part.added", "response.output_text.done", "response.content_part.done"]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        message_events[0],
        *message_events[1:],
        "response.output_item.done",
        *CALL_EVENTS,
        "response.completed",
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    arguments = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    final = events[-1]["response"]
    assert final["status"] == "completed" and text == "Let me check."
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][0]["content"][0]["text"] == text and final["output"][1]["arguments"] == arguments
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1]
    assert final == formatter.response(outcome).model_dump()
    assert prepared.on_complete is not None
    prepared.on_complete(outcome)
    stored = store.get(f"resp_{prepared.request_id}")
    assert stored is not None and stored[-1]["content"] == text
    assert [c["id"] for c in stored[-1]["tool_calls"]] == [final["output"][1]["call_id"]]
    assert stored[-1]["tool_calls"][0]["function"] == {"name": "get_time", "arguments": {"zone": "CET"}}


def test_the_gateway_renders_the_prompt_the_engine_renders(tools_model_dir: Path) -> None:
    """The prompt-token contract: tools, calls and results, the engine's ids are the gateway's and chat's."""
    tokenizer = Tokenizer.from_source(resolve_model(str(tools_model_dir)))
    call = {"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": '{"zone": "UTC"}'}
    body = {
        "model": M,
        "input": [
            {"role": "user", "content": QUESTION},
            {"type": "message", "role": "assistant", "content": "Checking."},
            call,
            {"type": "function_call_output", "call_id": "call_1", "output": "12:00"},
        ],
        "tools": TOOLS,
        "tool_choice": "none",
    }
    req = ResponsesRequest.model_validate(body)
    prepared = asyncio.run(responses.Endpoint(ResponseStore()).prepare(req, "contract", tokenizer, 4096))
    reader = PromptReader()
    reader.add(M, tokenizer)
    ids = prepared.children[0].prompt_token_ids
    assert ids == reader.read(req).token_ids
    chat_call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    messages = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "Checking.", "tool_calls": [chat_call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    chat = ChatCompletionRequest.model_validate({"model": M, "messages": messages, "tools": CHAT_TOOLS})
    assert ids == chat_token_ids(tokenizer, chat)
    rendered = tokenizer.decode(ids, skip_special_tokens=False)
    assert '"name": "get_time"' in rendered and "<tool_response>\n12:00\n</tool_response>" in rendered
    without_tools = ResponsesRequest.model_validate({**body, "tools": None, "tool_choice": None})
    assert len(reader.read(without_tools).token_ids or []) < len(ids)


LOOKAHEAD = {
    "type": "function",
    "name": "f",
    "parameters": {"type": "object", "properties": {"a": {"pattern": "(?=x)"}}},
}


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "web_search"),
        ({"tools": [TOOLS[0], {"type": "file_search", "vector_store_ids": []}]}, "tools[1].type", "file_search"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "nope"}}]}, "tools[0].parameters", ""),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools", "unique"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "launch"}}, "tool_choice", "not among tools"),
        ({"tool_choice": "required"}, "tool_choice", "only allowed when tools"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "invalid value"),
        ({"tools": [LOOKAHEAD], "tool_choice": {"type": "function", "name": "f"}}, "tools[0].parameters", "compile"),
        (
            {"tools": TOOLS, "tool_choice": "required", "text": {"format": {"type": "json_object"}}},
            "tool_choice",
            "only one field",
        ),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id", ""),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", ""),
    ],
)
def test_bad_tools_are_a_400_naming_the_field(api: openai.OpenAI, body: dict[str, Any], param: str, says: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        api.responses.create(**{"model": M, "input": QUESTION, "max_output_tokens": 4, **body})
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == param, error
    assert says in error["message"], error


def test_auto_needs_the_servers_consent(server: ServeProcess) -> None:
    """The shared tiny server runs without --enable-auto-tool-choice: letting the model choose is a 400 naming
    tool_choice, as for chat; a required call is still served (its template shows no tools, the grammar holds)."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=TINY_MODEL_NAME, input=QUESTION, tools=TOOLS, max_output_tokens=4)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "tool_choice"  # type: ignore[index]
    assert "--enable-auto-tool-choice" in refused.value.body["message"]  # type: ignore[index]
    out = client.responses.create(
        model=TINY_MODEL_NAME,
        input=QUESTION,
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=200,
    )
    _check_calls(out.output, set(SCHEMAS))
