"""The torch-free wire models the gateway shares: prompt shapes and errors that name the field."""

from __future__ import annotations

import subprocess
import sys

import pytest
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from pydantic import ValidationError

from shoal.protocol.errors import APIError, from_validation_errors
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest
from shoal.protocol.responses_api import ResponsesRequest


@pytest.mark.parametrize(
    ("prompt", "prompts"),
    [("hi", ["hi"]), ([1, 2], [[1, 2]]), (["a", "b"], ["a", "b"]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_every_prompt_shape_becomes_a_batch(prompt: object, prompts: list[object]) -> None:
    assert CompletionRequest.model_validate({"model": "m", "prompt": prompt}).prompts() == prompts


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "prompt": 5}, "prompt"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": "m", "messages": [{"role": "user"}], "stream": False, "stream_options": {}}, "stream_options"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokenz": 3}, "max_tokenz"),
    ],
)
def test_validation_errors_name_the_field(body: dict, param: str) -> None:
    model = ChatCompletionRequest if "messages" in body else CompletionRequest
    with pytest.raises(ValidationError) as exc:
        model.model_validate(body)
    error = from_validation_errors(exc.value.errors())
    assert (error.status_code, error.param) == (400, param)
    assert error.message.startswith(param) or param in error.message


def test_error_body_has_openai_shape() -> None:
    body = APIError(503, "busy", type="service_unavailable_error", headers={"Retry-After": "1"}).body()
    assert body == {"error": {"message": "busy", "type": "service_unavailable_error", "param": None, "code": None}}


def test_protocol_imports_no_torch() -> None:
    code = "import sys, shoal.protocol.openai_api, shoal.protocol.errors; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_null_is_the_default_where_a_field_has_no_null_of_its_own() -> None:
    """As OpenAI reads ``null``: ``n``, ``stream``, ``echo`` take their defaults; a completion's ``max_tokens: null``
    stays null (the rest of the context, as vLLM reads it); a required field is still required."""
    body = {"model": "m", "prompt": "x", "n": None, "stream": None, "echo": None, "max_tokens": None, "seed": None}
    request = CompletionRequest.model_validate(body)
    assert (request.n, request.stream, request.echo, request.max_tokens, request.seed) == (1, False, False, None, None)
    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": None, "add_generation_prompt": None}
    )
    assert (chat.logprobs, chat.add_generation_prompt) == (False, True)
    with pytest.raises(ValidationError, match="model"):
        CompletionRequest.model_validate({"model": None, "prompt": "x"})


def test_responses_request_declares_every_field_of_openais_schema() -> None:
    """Each field the SDK can send is honoured, ignored or refused by name (docs/api.md), never "unrecognized"."""
    sdk_fields = set(ResponseCreateParamsBase.__annotations__)
    assert sdk_fields <= set(ResponsesRequest.model_fields), sdk_fields - set(ResponsesRequest.model_fields)
