"""Required and named tool calls on the engine core: whatever the tools' parameter schemas, a random-weight model's
calls name one of the tools and their arguments validate against its schema.

The schemas are the structured-output tests' hypothesis strategy; the grammar is the one the server builds
(``tool_grammar``) and the output is read as the server reads it (``ToolCallStream``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.devices import TEST_DEVICE
from test_constrained_decoding import schemas

from shoal.engine import LLM, SamplingParams
from shoal.engine.tool_parsers import ToolCallStream, ToolParserSettings, plan_tool_calls
from shoal.protocol.openai_api import ChatCompletionRequest
from shoal.protocol.structured_output import tool_grammar

MAX_TOKENS = 300


@pytest.fixture(scope="module")
def llm(tiny_qwen2_dir: Path) -> LLM:
    return LLM(
        str(tiny_qwen2_dir),
        dtype="float32",
        block_size=4,
        num_kv_blocks=256,
        max_num_batched_tokens=64,
        device=TEST_DEVICE,
    )


def _request(tools: list[dict[str, Any]], tool_choice: Any, parallel: bool) -> ChatCompletionRequest:
    messages = [{"role": "user", "content": "Call a tool."}]
    body = {"model": "m", "messages": messages, "tools": tools, "tool_choice": tool_choice}
    return ChatCompletionRequest.model_validate(body | {"parallel_tool_calls": parallel})


@settings(max_examples=6, deadline=None, derandomize=True)  # the same schemas each run: a failure repeats
@given(parameters=st.lists(schemas, min_size=1, max_size=3), seed=st.integers(0, 2**31))
def test_every_call_names_a_tool_and_validates_against_its_parameters(
    llm: LLM, parameters: list[dict[str, Any]], seed: int
) -> None:
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": p}} for i, p in enumerate(parameters)]
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    last = tools[-1]["function"]["name"]
    cases = [
        (_request(tools, {"type": "function", "function": {"name": last}}, parallel=True), {last}, False),
        (_request(tools, "required", parallel=False), set(by_name), False),
        (_request(tools, "required", parallel=True), set(by_name), True),
    ]
    for req, names, many in cases:
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=MAX_TOKENS, structured_output=tool_grammar(req))
        (out,) = llm.generate(["Call a tool:"], params)
        plan = plan_tool_calls(req, ToolParserSettings(), None)
        assert plan is not None
        stream = ToolCallStream(plan)
        stream.update(out.text, final=True)
        calls = stream.tool_calls() or []
        assert calls, out.text
        if out.finish_reason == "length":  # many calls may run out of room: the last is then cut short
            assert many, out.text
            calls = calls[:-1]
        else:
            assert stream.finish_reason(out.finish_reason) == "tool_calls"
            assert many or len(calls) == 1
        for call in calls:
            assert call.function.name in names
            jsonschema.validate(json.loads(call.function.arguments), by_name[call.function.name])
