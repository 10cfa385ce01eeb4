"""The OpenAPI description of the API the engine and the gateway both serve, from the same pydantic request
models they validate with (``shoal.protocol.openai_api``), for schemathesis to generate requests from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from shoal.protocol.errors import ErrorResponse
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest

_REF = "#/components/schemas/{model}"


def _add(components: dict[str, Any], name: str, model: type[BaseModel]) -> dict[str, str]:
    schema = model.model_json_schema(ref_template=_REF)
    components.update(schema.pop("$defs", {}))
    components[name] = schema
    return {"$ref": _REF.format(model=name)}


def openapi_document() -> dict[str, Any]:
    components: dict[str, Any] = {}
    error = {"content": {"application/json": {"schema": _add(components, "ErrorResponse", ErrorResponse)}}}
    paths: dict[str, Any] = {}
    for path, name, model in (("/v1/completions", "CompletionRequest", CompletionRequest),
                              ("/v1/chat/completions", "ChatCompletionRequest", ChatCompletionRequest)):
        body = {"required": True, "content": {"application/json": {"schema": _add(components, name, model)}}}
        paths[path] = {"post": {"operationId": name, "requestBody": body, "responses": {
            "200": {"description": "the completion (JSON, or server-sent events when streaming)"},
            **{code: {"description": "an OpenAI error", **error} for code in ("400", "404", "413", "429", "503")},
        }}}
    paths["/v1/models"] = {"get": {"operationId": "listModels", "responses": {"200": {"description": "models"}}}}
    return {"openapi": "3.1.0", "info": {"title": "shoal (engine and gateway)", "version": "1"}, "paths": paths,
            "components": {"schemas": components}}
