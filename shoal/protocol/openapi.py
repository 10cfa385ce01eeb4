"""The OpenAPI document of the OpenAI-compatible routes that the engine and the gateway serve at ``/openapi.json``.

It is built from the same pydantic models both servers validate requests with (:mod:`shoal.protocol.openai_api`)
and answer errors with (:mod:`shoal.protocol.errors`), so the description cannot drift from what is enforced:
schemathesis fuzzes each running server from the document it serves (``tests/support/fuzzing.py``). The OpenAI
routes and vLLM's ``/tokenize``, ``/detokenize`` and ``/version`` are described; health, readiness, metrics and
the engine's KV events are for the platform, not for API clients. Torch-free: the gateway serves it too.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

from shoal.protocol.errors import ErrorResponse
from shoal.protocol.openai_api import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelList,
)
from shoal.protocol.responses_api import ResponseObject, ResponsesRequest
from shoal.protocol.tokenize_api import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
    VersionResponse,
)

_REF = "#/components/schemas/{model}"
_ERROR_STATUSES = ("400", "404", "413", "429", "503", "504")


def _schemas() -> tuple[dict[str, dict[str, str]], dict[str, Any]]:
    """Each model's ``$ref`` and the components they need: requests as validated, responses as serialized."""
    models = [
        (CompletionRequest, "validation"),
        (ChatCompletionRequest, "validation"),
        (ResponsesRequest, "validation"),
        (TokenizeCompletionRequest, "validation"),
        (TokenizeChatRequest, "validation"),
        (DetokenizeRequest, "validation"),
        (CompletionResponse, "serialization"),
        (ChatCompletionResponse, "serialization"),
        (ResponseObject, "serialization"),
        (TokenizeResponse, "serialization"),
        (DetokenizeResponse, "serialization"),
        (VersionResponse, "serialization"),
        (ModelList, "serialization"),
        (ErrorResponse, "serialization"),
    ]
    refs, definitions = models_json_schema(models, ref_template=_REF)  # type: ignore[arg-type]
    return {model.__name__: ref for (model, _), ref in refs.items()}, definitions.get("$defs", {})


def _post(
    operation_id: str, request: dict[str, Any], response: dict[str, str], errors: dict[str, Any], streams: bool = True
) -> dict[str, Any]:
    """A POST operation; a generation (``streams``) answers ``stream: true`` with server-sent events."""
    content: dict[str, Any] = {"application/json": {"schema": response}}
    if streams:
        content["text/event-stream"] = {}
    description = "the answer; with `stream: true`, server-sent events of its parts" if streams else "the answer"
    return {
        "post": {
            "operationId": operation_id,
            "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
            "responses": {"200": {"description": description, "content": content}, **errors},
        }
    }


def _get(operation_id: str, response: dict[str, str], description: str, errors: dict[str, Any]) -> dict[str, Any]:
    ok = {"description": description, "content": {"application/json": {"schema": response}}}
    return {"get": {"operationId": operation_id, "responses": {"200": ok, **errors}}}


@cache
def openapi_document(title: str, *, bearer_auth: bool = False) -> dict[str, Any]:
    """The document for one server; ``bearer_auth`` when it takes API keys (``Authorization: Bearer``), which
    adds the security scheme and the 401 every operation may then answer."""
    refs, components = _schemas()
    error = {"application/json": {"schema": refs["ErrorResponse"]}}
    statuses = ("401", *_ERROR_STATUSES) if bearer_auth else _ERROR_STATUSES
    errors = {code: {"description": "an OpenAI-style error", "content": error} for code in statuses}
    paths = {
        "/v1/completions": _post("createCompletion", refs["CompletionRequest"], refs["CompletionResponse"], errors),
        "/v1/chat/completions": _post(
            "createChatCompletion", refs["ChatCompletionRequest"], refs["ChatCompletionResponse"], errors
        ),
        "/v1/responses": _post("createResponse", refs["ResponsesRequest"], refs["ResponseObject"], errors),
        "/v1/models": _get(
            "listModels", refs["ModelList"], "the models served", {"401": errors["401"]} if bearer_auth else {}
        ),
        "/tokenize": _post(
            "tokenize",
            {"oneOf": [refs["TokenizeCompletionRequest"], refs["TokenizeChatRequest"]]},
            refs["TokenizeResponse"],
            errors,
            streams=False,
        ),
        "/detokenize": _post(
            "detokenize", refs["DetokenizeRequest"], refs["DetokenizeResponse"], errors, streams=False
        ),
        "/version": _get("version", refs["VersionResponse"], "the server's version", {}),
    }
    if bearer_auth:
        paths["/version"]["get"]["security"] = []  # the version is no secret: served without a key
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1"},
        "paths": paths,
        "components": {"schemas": components},
    }
    if bearer_auth:
        document["components"]["securitySchemes"] = {"apiKey": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"apiKey": []}]
    return document
