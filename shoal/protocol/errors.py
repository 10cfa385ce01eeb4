"""OpenAI's error body, ``{"error": {"message", "type", "param", "code"}}``, and the exception that carries it.

Both the engine server and the gateway raise ``APIError`` anywhere in a request and turn it into a JSON
response at the edge, so every failure a client sees has the same shape the official SDKs map onto their
exception classes (400 -> ``BadRequestError``, 404 -> ``NotFoundError``, 503 -> ``InternalServerError``).
Messages name the offending field and never carry a stack trace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    """The inner object of an OpenAI error body."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """The whole error body."""

    error: ErrorDetail


class APIError(Exception):
    """An error that a client should see, with its HTTP status and OpenAI error fields."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body to send."""
        detail = ErrorDetail(message=self.message, type=self.type, param=self.param, code=self.code)
        return ErrorResponse(error=detail).model_dump()


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """400: the request cannot be served as written."""
    return APIError(400, message, param=param, code=code)


def invalid_api_key() -> APIError:
    """401: no key, or one nobody holds; the SDKs raise ``AuthenticationError``. Never echoes the key sent."""
    return APIError(
        401, "Incorrect or missing API key: send it as `Authorization: Bearer <key>`.", code="invalid_api_key"
    )


def model_not_found(model: str) -> APIError:
    """404: the request names a model this server does not serve."""
    return APIError(
        404,
        f"The model `{model}` does not exist.",
        type="invalid_request_error",
        param="model",
        code="model_not_found",
    )


def payload_too_large(limit_bytes: int) -> APIError:
    """413: the body is larger than the server reads."""
    return APIError(
        413,
        f"Request body is larger than the limit of {limit_bytes} bytes.",
        code="request_too_large",
    )


def service_unavailable(message: str, retry_after_s: int) -> APIError:
    """503: try again later (queue full, draining); ``Retry-After`` says when."""
    return APIError(
        503,
        message,
        type="service_unavailable_error",
        code="service_unavailable",
        headers={"Retry-After": str(retry_after_s)},
    )


def internal_error() -> APIError:
    """500 without details: the cause goes to the log, never to the client."""
    return APIError(500, "The server had an internal error.", type="server_error", code="internal_error")


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def from_http_status(status_code: int, detail: str, headers: Mapping[str, str] | None = None) -> APIError:
    """A framework's own refusal (no such route, wrong method) in OpenAI's shape."""
    kind = "not_found_error" if status_code == 404 else "invalid_request_error"
    return APIError(status_code, detail, type=kind, headers=headers)


def _is_union_member(part: str) -> bool:
    """Pydantic puts the tried member of a union (``str``, ``list[int]``, ``TextContentPart``) in ``loc``."""
    return part in _TYPE_NAMES or "[" in part or "-" in part or part[:1].isupper()


def _param_name(location: Sequence[Any]) -> tuple[str, str | None]:
    """``("body", "messages", 0, "role")`` -> ``("messages[0].role", None)``; the union member comes second."""
    name, member = "", None
    for part in location:
        if part == "body" and not name:
            continue
        if isinstance(part, int):
            name += f"[{part}]"
        elif _is_union_member(part):
            member = part
        else:
            name += f".{part}" if name else str(part)
    return name, member


def from_validation_errors(errors: Iterable[Mapping[str, Any]]) -> APIError:
    """Turns pydantic's (or FastAPI's) validation errors into one 400 that names the first bad field.

    Every bad field is listed in the message; ``param`` names the first. A value that matches no member of
    a union gets one message listing the accepted shapes instead of one error per member.
    """
    messages: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for error in errors:
        param, member = _param_name(error.get("loc", ()))
        text = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        named = re.match(r"^(\w[\w.\[\]]*): ", text)
        if not param and named:  # a model-level check names its field (or its place: input[2].type) first
            param, text = named.group(1), text[named.end() :]
        if error.get("type") == "extra_forbidden":
            message = f"Unrecognized request argument supplied: {param}"
        elif error.get("type") == "json_invalid":
            message = f"Malformed JSON body: {error.get('ctx', {}).get('error', text)}"
        else:
            message = f"{param or 'body'}: {text}"
        if member is not None:
            members.setdefault(param, []).append(member)
        messages.setdefault(param, message)
    for param, tried in members.items():
        if len(tried) > 1:
            messages[param] = f"{param}: invalid value; expected one of: {', '.join(tried)}"
    if not messages:
        return invalid_request("Invalid request body.")
    first = next(iter(messages))
    return invalid_request("; ".join(messages.values()), param=first or None)
