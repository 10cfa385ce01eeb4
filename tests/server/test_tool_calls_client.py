"""Tools over HTTP: the official openai client against a real ``shoal serve`` of a random-weight Qwen2 whose chat
template is Qwen2.5's own (tools in the system turn, ``<tool_call>`` JSON, ``<tool_response>`` results).

A random model follows no instruction, so a ``required`` or named call that parses and validates, every seed, is
the constrained decoding's doing. ``auto`` leaves the choice to the model, which a random one never makes: its
output is pinned to a call with a guided choice to show the server reads it (the parsers themselves are
``tests/engine/test_tool_call_parsing.py``'s).
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
import transformers
from serve_harness import TINY_MODEL_NAME, TOOLS_MODEL_NAME, ServeProcess
from support.tool_schemas import SCHEMAS, TIME, WEATHER

from shoal.engine.server import chat
from shoal.engine.tool_parsers import ToolParserSettings
from shoal.gateway.prompts import PromptReader
from shoal.model_registry import resolve_model
from shoal.protocol.openai_api import ChatCompletionRequest
from shoal.tokenizer import Tokenizer, chat_token_ids

pytestmark = pytest.mark.timeout(300)
M = TOOLS_MODEL_NAME
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
LOOKAHEAD = {
    "type": "function",
    "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"pattern": "(?=x)"}}}},
}
SEEDS = range(4)


@pytest.fixture
def api(tools_server: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{tools_server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _check_calls(calls: list[Any] | None, names: set[str], cut_short: bool = False) -> None:
    """Each call names one of ``names`` and its arguments validate, but for a last one cut by ``max_tokens``."""
    assert calls, "no tool calls"
    for call in calls[:-1] if cut_short else calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len({c.id for c in calls}) == len(calls)


@pytest.mark.parametrize(
    ("tool_choice", "names"),
    [("required", set(SCHEMAS)), ({"type": "function", "function": {"name": "get_time"}}, {"get_time"})],
    ids=["required", "named"],
)
def test_one_call_parses_and_validates_over_many_seeds(api: openai.OpenAI, tool_choice: Any, names: set[str]) -> None:
    """A named function, or ``required`` without parallel calls: the grammar admits exactly one call, and the
    choice ends with it."""
    for seed in SEEDS:
        out = api.chat.completions.create(
            model=M,
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice=tool_choice,
            parallel_tool_calls=False,
            seed=seed,
            temperature=1.0,
            max_tokens=200,
        )  # type: ignore[call-overload]
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls", choice.message
        assert choice.message.content is None
        _check_calls(choice.message.tool_calls, names)
        assert len(choice.message.tool_calls or []) == 1


def test_parallel_required_calls_each_validate(api: openai.OpenAI) -> None:
    """With parallel calls a random model may go on calling until max_tokens: every complete call counts. Each of
    ``n`` choices is read on its own."""
    for seed in SEEDS:
        out = api.chat.completions.create(
            model=M, messages=MESSAGES, tools=TOOLS, tool_choice="required", n=2, seed=seed, max_tokens=120
        )  # type: ignore[call-overload]
        assert len(out.choices) == 2
        for choice in out.choices:
            assert choice.finish_reason in ("tool_calls", "length")
            _check_calls(choice.message.tool_calls, set(SCHEMAS), cut_short=choice.finish_reason == "length")


def test_streamed_calls_are_openais_deltas_and_add_up_to_the_answer(api: openai.OpenAI) -> None:
    for seed in SEEDS[:2]:
        kwargs: dict[str, Any] = dict(
            model=M, messages=MESSAGES, tools=TOOLS, tool_choice="required", seed=seed, temperature=1.0, max_tokens=120
        )
        whole = api.chat.completions.create(**kwargs)
        chunks = [c for c in api.chat.completions.create(stream=True, **kwargs) if c.choices]
        deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
        first = {d.index: d for d in reversed(deltas)}  # each call's first delta names it
        assert all(d.id and d.type == "function" and d.function and d.function.name for d in first.values())
        assert all(d.id is None for d in deltas if d is not first[d.index])
        arguments = {i: "".join(d.function.arguments or "" for d in deltas if d.index == i) for i in first}
        calls = whole.choices[0].message.tool_calls or []
        assert [(first[i].function.name, arguments[i]) for i in sorted(first)] == [  # type: ignore[union-attr]
            (c.function.name, c.function.arguments) for c in calls
        ]  # a seeded request repeats itself
        assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
        one_call = kwargs | {"parallel_tool_calls": False}  # the helper refuses a "length" finish
        with api.chat.completions.stream(**one_call) as stream:  # the SDK's own accumulation of the deltas
            final = stream.get_final_completion()
        single = api.chat.completions.create(**one_call).choices[0].message.tool_calls or []
        assert [(c.function.name, c.function.arguments) for c in final.choices[0].message.tool_calls or []] == [
            (c.function.name, c.function.arguments) for c in single
        ]


def test_none_is_content_only(api: openai.OpenAI) -> None:
    none = api.chat.completions.create(model=M, messages=MESSAGES, tools=TOOLS, tool_choice="none", max_tokens=8)  # type: ignore[call-overload]
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason in ("stop", "length")


def test_auto_reads_the_models_own_format(api: openai.OpenAI) -> None:
    """``auto`` (tools without tool_choice): the output is pinned to a hermes call with a guided choice (a random
    model would not write one), and comes back as content before the call and the call, streamed and not."""
    written = 'Let me check.<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
    kwargs: dict[str, Any] = dict(
        model=M, messages=MESSAGES, tools=TOOLS, max_tokens=200, extra_body={"guided_choice": [written]}
    )
    whole = api.chat.completions.create(**kwargs)
    message = whole.choices[0].message
    assert message.content == "Let me check." and whole.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        ("get_time", '{"zone": "CET"}')
    ]
    chunks = [c for c in api.chat.completions.create(stream=True, **kwargs) if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Let me check."
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert deltas[0].function.name == "get_time" and deltas[0].id  # type: ignore[union-attr]
    assert "".join(d.function.arguments or "" for d in deltas) == '{"zone": "CET"}'  # type: ignore[union-attr]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    plain = api.chat.completions.create(**kwargs | {"extra_body": {"guided_choice": ["No tools needed."]}})
    assert plain.choices[0].message.content == "No tools needed." and plain.choices[0].message.tool_calls is None
    assert plain.choices[0].finish_reason == "stop"


def test_a_tool_call_round_trip(api: openai.OpenAI, tools_model_dir: Path) -> None:
    """call -> the tool's result (role tool) -> an answer, the whole conversation through the template."""
    called = api.chat.completions.create(
        model=M, messages=MESSAGES, tools=TOOLS, tool_choice="required", seed=1, max_tokens=120
    )  # type: ignore[call-overload]
    message = called.choices[0].message
    calls = message.tool_calls or []
    results = [{"role": "tool", "tool_call_id": c.id, "content": json.dumps({"ok": c.function.name})} for c in calls]
    answered = api.chat.completions.create(  # the answer's message object sent back as it is, as the SDK shows
        model=M, messages=[*MESSAGES, message, *results], tools=TOOLS, tool_choice="none", max_tokens=8
    )  # type: ignore[call-overload]
    conversation = [*MESSAGES, message.model_dump(exclude_unset=True), *results]  # what the SDK sent
    assert answered.choices[0].message.content is not None and answered.choices[0].message.tool_calls is None
    tokenizer = Tokenizer.from_source(resolve_model(str(tools_model_dir)))
    request = ChatCompletionRequest.model_validate({"model": M, "messages": conversation, "tools": TOOLS})
    assert answered.usage.prompt_tokens == len(chat_token_ids(tokenizer, request))  # type: ignore[union-attr]
    rendered = tokenizer.decode(chat_token_ids(tokenizer, request), skip_special_tokens=False)
    assert all(f"<tool_response>\n{json.dumps({'ok': c.function.name})}\n</tool_response>" in rendered for c in calls)
    assert all(f'"name": "{c.function.name}", "arguments": ' in rendered for c in calls)


def test_tools_render_as_transformers_renders_them(tools_model_dir: Path) -> None:
    """The prompt with tools, calls and results is what ``apply_chat_template(tools=...)`` makes of it, and the
    engine and the gateway tokenize it alike (the prompt-token contract)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    messages: list[dict[str, Any]] = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    request = ChatCompletionRequest.model_validate({"model": M, "messages": messages, "tools": TOOLS})
    ours = Tokenizer.from_source(resolve_model(str(tools_model_dir)))
    theirs = transformers.AutoTokenizer.from_pretrained(str(tools_model_dir))
    hf_messages = [
        *MESSAGES,
        {**messages[1], "tool_calls": [{**call, "function": {"name": "get_time", "arguments": {"zone": "UTC"}}}]},
        messages[2],
    ]
    expected = theirs.apply_chat_template(hf_messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    ids = chat_token_ids(ours, request)
    assert ours.decode(ids, skip_special_tokens=False) == expected
    prepared = asyncio.run(
        chat.prepare(request, "contract", ours, 2048, ToolParserSettings(enable_auto_tool_choice=True))
    )
    reader = PromptReader()
    reader.add(M, ours)
    assert prepared.children[0].prompt_token_ids == ids == reader.read(request).token_ids
    plain = ChatCompletionRequest.model_validate({"model": M, "messages": MESSAGES})
    assert len(chat_token_ids(ours, plain)) < len(ids)


def test_tokenize_counts_the_tools_as_chat_does(api: openai.OpenAI, tools_server: ServeProcess) -> None:
    def count(body: dict[str, Any]) -> int:
        response = httpx.post(f"{tools_server.url}/tokenize", json={"model": M, "messages": MESSAGES, **body})
        assert response.status_code == 200, response.text
        return int(response.json()["count"])

    out = api.chat.completions.create(model=M, messages=MESSAGES, tools=TOOLS, tool_choice="none", max_tokens=1)  # type: ignore[call-overload]
    assert count({"tools": TOOLS}) == out.usage.prompt_tokens > count({})  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}]},
            "tools[0].function.parameters",
            "not a valid JSON Schema",
        ),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "launch"}}},
            "tool_choice",
            "not among tools",
        ),
        ({"tool_choice": "required"}, "tool_choice", "only allowed when tools"),
        (  # valid JSON Schema, but a look-ahead the grammar library's regular expressions do not have
            {"tools": [LOOKAHEAD], "tool_choice": {"type": "function", "function": {"name": "f"}}},
            "tools[0].function.parameters",
            "could not compile",
        ),
        ({"tools": [TOOLS[0], LOOKAHEAD], "tool_choice": "required"}, "tools", "could not compile"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "invalid value"),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools", "unique"),
        ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type", "function"),
        (
            {"tools": TOOLS, "tool_choice": "required", "extra_body": {"guided_choice": ["a"]}},
            "tool_choice",
            "only one field",
        ),
        (
            {"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
            "messages[0]",
            "only an assistant message",
        ),
    ],
)
def test_bad_tools_are_a_400_naming_the_field(api: openai.OpenAI, body: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        api.chat.completions.create(**{"model": M, "messages": MESSAGES, "max_tokens": 4, **body})  # type: ignore[call-overload]
    assert refused.value.body["param"] == param and words in refused.value.body["message"]  # type: ignore[index]


def test_auto_needs_the_servers_consent_and_a_parser(client: openai.OpenAI) -> None:
    """The shared server runs without --enable-auto-tool-choice, and its ChatML template shows no tool calls:
    letting the model choose is a 400 naming tool_choice there, as in vLLM; required still works."""
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=TINY_MODEL_NAME, messages=MESSAGES, tools=TOOLS, max_tokens=4)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "tool_choice"  # type: ignore[index]
    assert "--enable-auto-tool-choice" in refused.value.body["message"]  # type: ignore[index]
    out = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,  # one call: with more a random model may call on until max_tokens cuts one
        seed=0,
        max_tokens=200,  # type: ignore[arg-type]
    )
    assert out.choices[0].finish_reason == "tool_calls"
    _check_calls(out.choices[0].message.tool_calls, set(SCHEMAS))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smollm2_required_and_named_calls(smollm2_server: ServeProcess) -> None:
    """The bundled SmolLM2, whose template shows no tools: required and named calls still parse and validate,
    streamed and not, and a round trip answers in text."""
    smol = openai.OpenAI(base_url=f"{smollm2_server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    model = "smollm2-135m"
    named = {"type": "function", "function": {"name": "get_weather"}}
    for tool_choice in ("required", named):
        kwargs: dict[str, Any] = dict(
            model=model,
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice=tool_choice,
            parallel_tool_calls=False,
            temperature=0.7,
            seed=0,
            max_tokens=120,
        )
        whole = smol.chat.completions.create(**kwargs)
        assert whole.choices[0].finish_reason == "tool_calls"
        _check_calls(whole.choices[0].message.tool_calls, set(SCHEMAS))
        with smol.chat.completions.stream(**kwargs) as stream:
            streamed = stream.get_final_completion().choices[0].message.tool_calls or []
        assert [(c.function.name, c.function.arguments) for c in streamed] == [
            (c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls or []
        ]
    call = (whole.choices[0].message.tool_calls or [])[0]
    conversation = [
        *MESSAGES,
        whole.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees."},
    ]
    answer = smol.chat.completions.create(
        model=model, messages=conversation, tools=TOOLS, tool_choice="none", max_tokens=30
    )  # type: ignore[arg-type]
    assert answer.choices[0].message.content and answer.choices[0].message.tool_calls is None
