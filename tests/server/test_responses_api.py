"""``POST /v1/responses`` on a real ``shoal serve``, through the official openai client: the response object, its
event stream as the SDK's own stream helper reads it, ``text.format`` enforced, the prompt the chat template makes
of ``instructions`` and ``input``, and bad input refused naming its field. SmolLM2 answers the issue's question."""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from serve_harness import TINY_MODEL_NAME, ServeProcess, wait_for

from shoal.local import metric

pytestmark = pytest.mark.timeout(240)
M = TINY_MODEL_NAME
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 999},
        "kind": {"type": "string", "enum": ["cat", "dog", "fish"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["calm", "loud"]}, "maxItems": 2},
    },
    "required": ["id", "kind", "tags"],
    "additionalProperties": False,
}
JSON_SCHEMA_FORMAT = {"format": {"type": "json_schema", "name": "pet", "schema": SCHEMA, "strict": True}}
EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


class Pet(BaseModel):
    name: str = Field(max_length=8)
    kind: Literal["cat", "dog", "fish"]


def tokenized(server: ServeProcess, messages: list[dict[str, str]]) -> int:
    """How many tokens the chat template makes of ``messages``, as ``/tokenize`` counts them."""
    out = httpx.post(f"{server.url}/tokenize", json={"model": M, "messages": messages}, timeout=30)
    return int(out.json()["count"])


def test_a_string_input_is_answered_with_a_response_object(server: ServeProcess, client: openai.OpenAI) -> None:
    out = client.responses.create(model=M, input="Explain backpressure in simple terms", max_output_tokens=8)
    assert out.id.startswith("resp_") and out.object == "response" and out.model == M
    assert out.created_at > 0
    (message,) = out.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    (part,) = message.content
    assert part.type == "output_text" and out.output_text == part.text
    usage = out.usage
    assert usage is not None
    assert usage.input_tokens == tokenized(
        server, [{"role": "user", "content": "Explain backpressure in simple terms"}]
    )
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens and 1 <= usage.output_tokens <= 8
    if out.status == "incomplete":  # a random model rarely stops by itself within 8 tokens
        assert out.incomplete_details is not None and out.incomplete_details.reason == "max_output_tokens"
        assert usage.output_tokens == 8 and message.status == "incomplete"
    else:
        assert out.status == "completed" and out.incomplete_details is None and message.status == "completed"


def test_items_and_instructions_make_the_conversation_the_template_renders(
    server: ServeProcess, client: openai.OpenAI
) -> None:
    items: Any = [
        {"role": "system", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name a river."}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_earlier",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Nile.", "annotations": []}],
        },
        {"role": "user", "content": "Another?"},
    ]
    out = client.responses.create(model=M, input=items, instructions="Be brief.", max_output_tokens=4)
    expected = [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Name a river."},
        {"role": "assistant", "content": "Nile."},
        {"role": "user", "content": "Another?"},
    ]
    assert out.usage is not None and out.usage.input_tokens == tokenized(server, expected)
    assert out.instructions == "Be brief."


def test_settings_are_echoed_and_store_is_accepted(client: openai.OpenAI) -> None:
    out = client.responses.create(
        model=M,
        input="hi",
        max_output_tokens=3,
        temperature=0.0,
        top_p=0.5,
        metadata={"ticket": "42"},
        user="u-1",
        store=True,
        parallel_tool_calls=False,
        tool_choice="none",
        truncation="disabled",
    )
    assert out.metadata == {"ticket": "42"} and out.user == "u-1" and out.max_output_tokens == 3
    assert out.temperature == 0.0 and out.top_p == 0.5 and out.parallel_tool_calls is False
    assert out.tools == [] and out.previous_response_id is None


def test_the_stream_is_openais_event_sequence(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model=M, input="Tell me a story.", max_output_tokens=6, stream=True))
    kinds = [event.type for event in events]
    assert (
        kinds[:4] == EVENTS and kinds[-4:-1] == CLOSING and kinds[-1] in ("response.completed", "response.incomplete")
    )
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert deltas == final.output_text == events[-4].text  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens <= 6
    assert events[0].response.status == "in_progress" and events[0].response.id == final.id  # type: ignore[union-attr]
    if kinds[-1] == "response.incomplete":
        assert final.incomplete_details.reason == "max_output_tokens"


def test_the_sdks_stream_helper_and_parse_read_a_json_schema_answer(client: openai.OpenAI) -> None:
    """A random model follows no instruction: every valid output here is the constraint's doing."""
    for _ in range(3):
        whole = client.responses.create(model=M, input="A pet as JSON.", text=JSON_SCHEMA_FORMAT, max_output_tokens=80)  # type: ignore[arg-type]
        assert whole.status == "completed", whole.output_text
        jsonschema.validate(json.loads(whole.output_text), SCHEMA)
        assert whole.text is not None and whole.text.format.type == "json_schema"
        with client.responses.stream(
            model=M,
            input="A pet as JSON.",
            text=JSON_SCHEMA_FORMAT,  # type: ignore[arg-type]
            max_output_tokens=80,
        ) as stream:
            final = stream.get_final_response()
        jsonschema.validate(json.loads(final.output_text), SCHEMA)
        parsed = client.responses.parse(model=M, input="A pet.", text_format=Pet, max_output_tokens=80)
        assert isinstance(parsed.output_parsed, Pet)
    as_object = client.responses.create(
        model=M, input="JSON please.", text={"format": {"type": "json_object"}}, max_output_tokens=60
    )
    if as_object.status == "completed":  # an unbounded object may run past the limit; what is there is an object
        assert isinstance(json.loads(as_object.output_text), dict)


def test_logprobs_are_included_when_asked(client: openai.OpenAI) -> None:
    out = client.responses.create(
        model=M, input="hi", max_output_tokens=3, include=["message.output_text.logprobs"], top_logprobs=2
    )
    logprobs = out.output[0].content[0].logprobs  # type: ignore[union-attr]
    assert logprobs is not None and len(logprobs) == out.usage.output_tokens  # type: ignore[union-attr]
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in logprobs)
    plain = client.responses.create(model=M, input="hi", max_output_tokens=3)
    assert plain.output[0].content[0].logprobs is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type", "reasoning"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
            "input_image",
        ),
        ({"input": "hi", "previous_response_id": "resp_never"}, "previous_response_id", "not found"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation", "not supported"),
        ({"input": "hi", "background": True}, "background", "not supported"),
        ({"input": "hi", "truncation": "auto"}, "truncation", "refused, not cut"),
        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", "schema"),
        ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format.type", "json_schema"),
        (
            {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "bogus"}}}},
            "text.format",
            "",
        ),
        ({"input": "hi", "max_output_tokens": 10_000}, "max_output_tokens", "context length"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", ""),
        ({"input": []}, "input", "empty"),
        ({"input": "hi", "extra_body": {"max_tokens": 5}}, "max_tokens", "Unrecognized"),
        ({"input": "hi", "include": ["everything"]}, "include[0]", ""),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    client: openai.OpenAI, body: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=M, **body)
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == param, error
    assert says in error["message"], error


def test_previous_response_id_continues_the_conversation_without_its_instructions(
    server: ServeProcess, client: openai.OpenAI
) -> None:
    first = client.responses.create(model=M, instructions="Be brief.", input="My name is Ada.", max_output_tokens=4)
    second = client.responses.create(
        model=M, previous_response_id=first.id, input="What is my name?", max_output_tokens=4
    )
    assert second.previous_response_id == first.id and second.store is True
    earlier = [{"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": first.output_text}]
    expected = [*earlier, {"role": "user", "content": "What is my name?"}]
    assert second.usage is not None and second.usage.input_tokens == tokenized(server, expected)
    third = client.responses.create(  # a chain: the third sees both turns, under its own instructions
        model=M, previous_response_id=second.id, instructions="Answer.", input="Sure?", max_output_tokens=2
    )
    chain = [
        {"role": "system", "content": "Answer."},
        *expected,
        {"role": "assistant", "content": second.output_text},
        {"role": "user", "content": "Sure?"},
    ]
    assert third.usage is not None and third.usage.input_tokens == tokenized(server, chain)


def test_a_response_not_stored_cannot_be_continued(client: openai.OpenAI) -> None:
    unstored = client.responses.create(model=M, input="Forget this.", max_output_tokens=2, store=False)
    assert unstored.store is False
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=M, previous_response_id=unstored.id, input="What did I say?")
    assert refused.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
    streamed = list(client.responses.create(model=M, input="Keep this.", max_output_tokens=2, stream=True))
    follow_up = client.responses.create(
        model=M,
        previous_response_id=streamed[-1].response.id,  # type: ignore[union-attr]
        input="And?",
        max_output_tokens=2,
    )
    assert follow_up.status in ("completed", "incomplete")  # a streamed response is stored too


def test_an_unknown_model_is_a_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")


def test_a_stream_whose_client_leaves_is_aborted(server: ServeProcess) -> None:
    aborted_before = metric(server.url, "shoal_engine_requests_aborted_total")
    # a story no 200 tokens can finish: the random model's end-of-text cannot end it before the hang-up does
    story = {"type": "object", "properties": {"story": {"type": "string", "minLength": 4000}}, "required": ["story"]}
    text = {"format": {"type": "json_schema", "name": "story", "schema": story}}
    body = {"model": M, "input": "A long story, please.", "max_output_tokens": 200, "stream": True, "text": text}
    with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        assert next(lines) == "event: response.created"  # then hang up, with the first token just sent
    assert wait_for(lambda: metric(server.url, "shoal_engine_requests_aborted_total") == aborted_before + 1)
    assert wait_for(lambda: metric(server.url, "shoal_engine_requests_running") == 0)
    assert metric(server.url, "shoal_engine_kv_cache_usage_ratio") == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smollm2_explains_backpressure_whole_and_streamed(smollm2_server: ServeProcess) -> None:
    api = openai.OpenAI(base_url=f"{smollm2_server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    question = "Explain backpressure in simple terms"
    out = api.responses.create(model="smollm2-135m", input=question, max_output_tokens=48, temperature=0)
    assert out.status in ("completed", "incomplete") and len(out.output_text.split()) >= 5, out.output_text
    stream = api.responses.create(model="smollm2-135m", input=question, max_output_tokens=48, stream=True)
    events = list(stream)
    final = events[-1].response  # type: ignore[union-attr]
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert deltas == final.output_text and len(deltas.split()) >= 5, deltas
    assert final.usage is not None and final.usage.input_tokens == out.usage.input_tokens  # type: ignore[union-attr]
