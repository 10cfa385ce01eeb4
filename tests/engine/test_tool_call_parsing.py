"""Tool calls read from model output: each family's format round-trips any call, streamed in any pieces.

The writers here are the reference: what a model of each family writes, as its chat template teaches it. The
parsers must read back every name and argument object they write, whole or arriving in arbitrary pieces, and the
streamed deltas must add up to exactly the non-streamed answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_checkpoints import CHAT_TEMPLATE, QWEN_TOOLS_CHAT_TEMPLATE

from shoal.engine.tool_parsers import PARSERS, ToolCallFormat, ToolCallPlan, ToolCallStream, detect, extract
from shoal.engine.tool_parsers.formats import REQUIRED
from shoal.engine.tool_parsers.json_scan import value_end

Call = tuple[str, dict[str, Any]]


def write_hermes(calls: list[Call], indent: int | None) -> str:
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a}, indent=indent)}\n</tool_call>" for n, a in calls
    )


def write_llama3(calls: list[Call], indent: int | None) -> str:
    return "; ".join(json.dumps({"name": n, "parameters": a}, indent=indent) for n, a in calls)


def write_mistral(calls: list[Call], indent: int | None) -> str:
    return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in calls], indent=indent)


def write_required(calls: list[Call], indent: int | None) -> str:
    return json.dumps([{"name": n, "parameters": a} for n, a in calls], indent=indent)


WRITERS = {"hermes": write_hermes, "llama3_json": write_llama3, "mistral": write_mistral, "required": write_required}
FORMATS: dict[str, ToolCallFormat] = {**PARSERS, "required": REQUIRED}

names = st.from_regex(r"[a-zA-Z0-9_-]{1,64}", fullmatch=True)
tricky_text = st.lists(
    st.sampled_from([*'ab {}[]",:;\\\n<>/é🐟', "<tool_call>", "</tool_call>", "[TOOL_CALLS]"]), max_size=6
).map("".join)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(tricky_text, json_values, max_size=4)
calls_strategy = st.lists(st.tuples(names, arguments), min_size=1, max_size=3)


def read_back(found: list[Any]) -> list[Call]:
    return [(c.name, json.loads(c.arguments)) for c in found]


@pytest.mark.parametrize("family", sorted(WRITERS))
@settings(max_examples=150, deadline=None)
@given(calls=calls_strategy, indent=st.sampled_from([None, 2]))
def test_any_call_round_trips(family: str, calls: list[Call], indent: int | None) -> None:
    found = extract(WRITERS[family](calls, indent), FORMATS[family], final=True)
    assert found.content == ""
    assert read_back(found.calls) == calls


@pytest.mark.parametrize("family", sorted(WRITERS))
@settings(max_examples=80, deadline=None)
@given(calls=calls_strategy, data=st.data())
def test_streamed_deltas_add_up_to_the_answer(family: str, calls: list[Call], data: st.DataObject) -> None:
    text = WRITERS[family](calls, None)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(text) - 1), max_size=12)) if len(text) > 1 else set())
    stream = ToolCallStream(ToolCallPlan(FORMATS[family], None, parallel=True))
    streamed: dict[int, dict[str, Any]] = {}
    for end in [*cuts, len(text)]:
        content, deltas = stream.update(text[:end], final=end == len(text))
        assert content == ""
        for d in deltas:
            if d.index not in streamed:  # the first delta of a call: id, type and name, in order
                assert d.index == len(streamed) and d.id and d.type == "function" and d.function.name
                streamed[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
            else:
                assert d.id is None and d.function.name is None
            streamed[d.index]["arguments"] += d.function.arguments or ""
    answer = stream.tool_calls() or []
    assert [(c.id, c.function.name, c.function.arguments) for c in answer] == [
        (s["id"], s["name"], s["arguments"]) for s in streamed.values()
    ]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in answer] == calls
    assert stream.finish_reason("stop") == "tool_calls" and stream.message_content() is None


@pytest.mark.parametrize(("family", "marker"), [("hermes", "<tool_call>"), ("mistral", "[TOOL_CALLS]")])
@settings(max_examples=60, deadline=None)
@given(before=st.text(alphabet="ab <>[]{}\n", max_size=20), calls=calls_strategy)
def test_text_before_the_marker_is_content(family: str, marker: str, before: str, calls: list[Call]) -> None:
    text = before.replace("<", "(").replace("[", "(") + WRITERS[family](calls, None)
    found = extract(text, FORMATS[family], final=True)
    assert found.content + text[len(found.content) :] == text and text[len(found.content) :].startswith(marker)
    assert read_back(found.calls) == calls


def test_a_possible_marker_is_held_back_until_it_is_one_or_not() -> None:
    hermes = PARSERS["hermes"]
    assert extract("Let me check <tool_ca", hermes, final=False).content == "Let me check "
    assert extract("Let me check <tool_ca", hermes, final=True).content == "Let me check <tool_ca"
    assert extract("a <b> c", hermes, final=False).content == "a <b> c"
    stream = ToolCallStream(ToolCallPlan(hermes, None, parallel=True))
    sent = [stream.update(t, final=False)[0] for t in ("I will", "I will <", "I will <to", "I will <tea>")]
    assert sent == ["I will", " ", "", "<tea>"]


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 4.",
        '{"answer": 4}',  # JSON that is not a call: no name
        '{"name": 4, "parameters": {}}',  # a name that is not a string
        '{"name": "f", "parameters": {"x": }}',  # not valid JSON
        '{"nam',  # cut short before a name
    ],
)
def test_output_without_a_valid_call_is_all_content(text: str) -> None:
    found = extract(text, PARSERS["llama3_json"], final=True)
    assert found.content == text and found.calls == []
    stream = ToolCallStream(ToolCallPlan(PARSERS["llama3_json"], None, parallel=True))
    content, deltas = stream.update(text, final=True)
    assert content == text and deltas == [] and stream.finish_reason("stop") == "stop"
    assert stream.message_content() == text and stream.tool_calls() is None


@pytest.mark.parametrize("streamed", [False, True])
def test_a_call_cut_short_once_named_is_answered_as_written(streamed: bool) -> None:
    """As OpenAI answers a call cut by max_tokens: the call with the arguments written so far."""
    text = write_hermes([("a", {"x": 1})], None) + '\n<tool_call>\n{"name": "b", "arguments": {"y": '
    stream = ToolCallStream(ToolCallPlan(PARSERS["hermes"], None, parallel=True))
    if streamed:
        stream.update(text[: len(text) // 2], final=False)
    content, _ = stream.update(text, final=True)
    assert content == "" and stream.finish_reason("length") == "length"
    calls = [(c.function.name, c.function.arguments) for c in stream.tool_calls() or []]
    assert calls == [("a", '{"x": 1}'), ("b", '{"y": ')]


def test_without_parallel_tool_calls_only_the_first_call_is_kept() -> None:
    stream = ToolCallStream(ToolCallPlan(REQUIRED, None, parallel=False))
    stream.update(write_required([("a", {}), ("b", {"y": 2})], None), final=True)
    assert [c.function.name for c in stream.tool_calls() or []] == ["a"]


def test_a_named_function_takes_the_whole_output_as_its_arguments() -> None:
    stream = ToolCallStream(ToolCallPlan(None, "get_weather", parallel=True))
    _, first = stream.update('{"ci', final=False)
    _, rest = stream.update('{"city": "Paris"}', final=True)
    assert first[0].function.name == "get_weather" and first[0].id and first[0].id.startswith("call_")
    assert first[0].function.arguments + (rest[0].function.arguments or "") == '{"city": "Paris"}'
    assert stream.finish_reason("stop") == "tool_calls" and stream.message_content() is None


def test_mistral_ids_are_nine_alphanumerics_and_others_are_openais() -> None:
    mistral = ToolCallStream(ToolCallPlan(PARSERS["mistral"], None, parallel=True))
    mistral.update(write_mistral([("f", {})], None), final=True)
    hermes = ToolCallStream(ToolCallPlan(PARSERS["hermes"], None, parallel=True))
    hermes.update(write_hermes([("f", {})], None), final=True)
    mistral_id, hermes_id = (s.tool_calls()[0].id for s in (mistral, hermes))  # type: ignore[index]
    assert len(mistral_id) == 9 and mistral_id.isalnum()
    assert hermes_id.startswith("call_") and len(hermes_id) == 29


def test_the_parser_is_found_in_the_chat_template() -> None:
    llama31 = '{{- \'{"name": function name, "parameters": dictionary of argument name and its value}\' }}ipython'
    mistral = "{%- if message.tool_calls %}{{- '[TOOL_CALLS][' }}{%- endif %}"
    assert detect(QWEN_TOOLS_CHAT_TEMPLATE) is PARSERS["hermes"]
    assert detect(llama31) is PARSERS["llama3_json"]
    assert detect(mistral) is PARSERS["mistral"]
    assert detect(CHAT_TEMPLATE) is None and detect(None) is None


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_a_values_end_is_found_and_not_before_it_is_written(value: Any) -> None:
    text = json.dumps(value)
    assert value_end(text + ", ", 0) == len(text)
    if text[0] in '{["':
        assert all(value_end(text[:end], 0) is None for end in range(1, len(text)))
