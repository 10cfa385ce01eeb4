"""Structured output over HTTP: the official openai client against a real ``shoal serve`` of a random-weight model.

A random model follows no instruction, so every valid output here is the constrained decoding's doing. The schemas
are bounded (short strings, enums, ranged integers, few items): an unbounded one lets a weak model write until
``max_tokens`` cuts it, which is a "length" finish, not a broken promise.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from serve_harness import TINY_MODEL_NAME, ServeProcess

pytestmark = pytest.mark.timeout(240)
M = TINY_MODEL_NAME
MESSAGES = [{"role": "user", "content": "Describe a pet as JSON."}]
SEEDS = range(6)


class Pet(BaseModel):
    name: str = Field(max_length=8)
    age: int = Field(ge=0, le=30)
    kind: Literal["cat", "dog", "fish"]
    tags: list[Literal["calm", "loud", "small"]] = Field(max_length=3)


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 999},
        "owner": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 6}, "vip": {"type": "boolean"}},
            "required": ["name", "vip"],
            "additionalProperties": False,
        },
        "scores": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 10}, "maxItems": 3},
    },
    "required": ["id", "owner", "scores"],
    "additionalProperties": False,
}
STRICT = {"type": "json_schema", "json_schema": {"name": "record", "schema": SCHEMA, "strict": True}}


def test_parse_returns_the_pydantic_model_over_many_seeds(client: openai.OpenAI) -> None:
    for seed in SEEDS:
        out = client.chat.completions.parse(
            model=M, messages=MESSAGES, response_format=Pet, seed=seed, temperature=1.0, max_tokens=120
        )  # type: ignore[call-overload]
        choice = out.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        assert isinstance(choice.message.parsed, Pet)


def test_parse_streams_the_pydantic_model(client: openai.OpenAI) -> None:
    for seed in SEEDS[:3]:
        with client.chat.completions.stream(
            model=M, messages=MESSAGES, response_format=Pet, seed=seed, temperature=1.0, max_tokens=120
        ) as stream:  # type: ignore[call-overload]
            final = stream.get_final_completion()
        assert isinstance(final.choices[0].message.parsed, Pet)


def test_strict_json_schema_validates_streaming_and_not(client: openai.OpenAI) -> None:
    for seed in SEEDS:
        kwargs: dict[str, Any] = dict(
            model=M, messages=MESSAGES, response_format=STRICT, seed=seed, temperature=1.0, max_tokens=160
        )
        whole = client.chat.completions.create(**kwargs)
        assert whole.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(whole.choices[0].message.content or ""), SCHEMA)
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == whole.choices[0].message.content  # a seeded request repeats itself
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_completions_take_response_format_and_n_choices(client: openai.OpenAI) -> None:
    out = client.completions.create(
        model=M,
        prompt="A record:",
        max_tokens=160,
        n=3,
        temperature=1.0,
        seed=7,
        extra_body={"response_format": STRICT},
    )
    assert len(out.choices) == 3
    for choice in out.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.text), SCHEMA)


def test_guided_choice_regex_json_and_structured_outputs(client: openai.OpenAI) -> None:
    choices = ["positive", "negative", "neutral"]
    regex = r"\d{3}-[a-z]{2,4}"
    for seed in SEEDS:
        common: dict[str, Any] = dict(model=M, messages=MESSAGES, seed=seed, temperature=1.0, max_tokens=40)
        chosen = client.chat.completions.create(extra_body={"guided_choice": choices}, **common)
        assert chosen.choices[0].message.content in choices
        matched = client.completions.create(
            model=M, prompt="Code:", seed=seed, max_tokens=40, extra_body={"guided_regex": regex}
        )
        assert re.fullmatch(regex, matched.choices[0].text), matched.choices[0].text
        as_json = client.chat.completions.create(
            extra_body={"guided_json": json.dumps(SCHEMA)}, **common | {"max_tokens": 160}
        )
        jsonschema.validate(json.loads(as_json.choices[0].message.content or ""), SCHEMA)
        new_name = client.chat.completions.create(extra_body={"structured_outputs": {"choice": choices}}, **common)
        assert new_name.choices[0].message.content in choices


def test_logprobs_of_a_constrained_request_are_the_models_own(client: openai.OpenAI) -> None:
    """The mask sets forbidden logits to -inf; the logprobs reported are the raw model's, finite for every token."""
    out = client.chat.completions.create(
        model=M, messages=MESSAGES, max_tokens=10, logprobs=True, top_logprobs=5, extra_body={"guided_choice": ["yes"]}
    )
    assert out.choices[0].message.content == "yes"
    tokens = out.choices[0].logprobs.content  # type: ignore[union-attr]
    assert tokens and all(len(t.top_logprobs) == 5 for t in tokens)
    assert all(-1e4 < lp.logprob <= 0 for t in tokens for lp in [t, *t.top_logprobs])


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "nope"}, "strict": True},
                }
            },
            "response_format",
            "could not compile",
        ),
        ({"guided_regex": "a("}, "guided_regex", "could not compile"),
        ({"guided_grammar": "root ::= missing"}, "guided_grammar", "could not compile"),
        ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
        ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice", "only one field"),
        ({"response_format": {"type": "json_schema"}}, "response_format", "json_schema is required"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
    ],
)
def test_bad_constraints_are_a_400_naming_the_field(
    client: openai.OpenAI, server: ServeProcess, body: dict[str, Any], param: str, words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=M, messages=MESSAGES, max_tokens=4, extra_body=body)
    assert refused.value.body["param"] == param and words in refused.value.body["message"]  # type: ignore[index]
    assert client.chat.completions.create(model=M, messages=MESSAGES, max_tokens=2).choices  # the engine still serves


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smollm2_parse_json_object_and_strict_schema(smollm2_server: ServeProcess) -> None:
    """The bundled SmolLM2: the pydantic model and a strict schema over seeds, streamed and not, and json_object."""
    api = openai.OpenAI(base_url=f"{smollm2_server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    model = "smollm2-135m"
    for seed in range(3):
        out = api.chat.completions.parse(
            model=model, messages=MESSAGES, response_format=Pet, seed=seed, temperature=0.7, max_tokens=120
        )  # type: ignore[call-overload]
        assert isinstance(out.choices[0].message.parsed, Pet)
        kwargs: dict[str, Any] = dict(
            model=model, messages=MESSAGES, response_format=STRICT, seed=seed, temperature=0.7, max_tokens=200
        )
        chunks = list(api.chat.completions.create(stream=True, **kwargs))
        jsonschema.validate(json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)), SCHEMA)
    anything = api.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Give the capital of France as JSON with the key city."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=60,
    )
    assert anything.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(anything.choices[0].message.content or ""), dict)
