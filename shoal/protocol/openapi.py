"""The OpenAPI document of the OpenAI-compatible routes that the engine and the gateway serve at ``/openapi.json``.

It is built from the same pydantic models both servers validate requests with (:mod:`shoal.protocol.openai_api`)
and answer errors with (:mod:`shoal.protocol.errors`), so the description cannot drift from what is enforced:
schemathesis fuzzes each running server from the document it serves (``tests/support/fuzzing.py``). Only the
OpenAI routes are described; health, readiness, metrics and the engine's KV events are for the platform, not
for API clients. Torch-free: the gateway serves it too.
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

_REF = "#/components/schemas/{model}"
_ERROR_STATUSES = ("400", "404", "413", "429", "503", "504")


def _schemas() -> tuple[dict[str, dict[str, str]], dict[str, Any]]:
    """Each model's ``$ref`` and the components they need: requests as validated, responses as serialized."""
    models = [
        (CompletionRequest, "validation"),
        (ChatCompletionRequest, "validation"),
        (CompletionResponse, "serialization"),
        (ChatCompletionResponse, "serialization"),
        (ModelList, "serialization"),
        (ErrorResponse, "serialization"),
    ]
    refs, definitions = models_json_schema(models, ref_template=_REF)  # type: ignore[arg-type]
    return {model.__name__: ref for (model, _), ref in refs.items()}, definitions.get("$defs", {})


def _generation(
    operation_id: str, request: dict[str, str], response: dict[str, str], errors: dict[str, Any]
) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation_id,
            "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
            "responses": {
                "200": {
                    "description": "the completion; with `stream: true`, server-sent events of its chunks",
                    "content": {"application/json": {"schema": response}, "text/event-stream": {}},
                },
                **errors,
            },
        }
    }


@cache
def openapi_document(title: str, *, bearer_auth: bool = False) -> dict[str, Any]:
    """The document for one server; ``bearer_auth`` when it takes API keys (``Authorization: Bearer``), which
    adds the security scheme and the 401 every operation may then answer."""
    refs, components = _schemas()
    error = {"application/json": {"schema": refs["ErrorResponse"]}}
    statuses = ("401", *_ERROR_STATUSES) if bearer_auth else _ERROR_STATUSES
    errors = {code: {"description": "an OpenAI-style error", "content": error} for code in statuses}
    paths = {
        "/v1/completions": _generation(
            "createCompletion", refs["CompletionRequest"], refs["CompletionResponse"], errors
        ),
        "/v1/chat/completions": _generation(
            "createChatCompletion", refs["ChatCompletionRequest"], refs["ChatCompletionResponse"], errors
        ),
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "responses": {
                    "200": {
                        "description": "the models served",
                        "content": {"application/json": {"schema": refs["ModelList"]}},
                    },
                    **({"401": errors["401"]} if bearer_auth else {}),
                },
            }
        },
    }
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
