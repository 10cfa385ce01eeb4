"""A request body read, parsed and validated the same way by the engine server and the gateway.

Reading (``read_body``, over the ASGI ``receive`` both servers have) is capped: past the limit the answer is a
413 and nothing more is kept. The gateway, which faces the clients, stops reading there; the engine reads and
drops up to ``drain_limit`` first, so that a client still writing its body reads the 413 rather than a reset
connection. Parsing (``parse_json_object``) turns every way a body can fail to be a JSON object into a 400 naming
the problem: bytes that are not UTF-8, malformed JSON,
JSON nested deeper than the decoder's recursion limit (Python's ``json`` raises ``RecursionError`` there, which
would otherwise surface as a 500), an integer literal longer than Python converts (``ValueError``), a string
escaping half of a surrogate pair (``"\ud800"``: valid JSON, but no text: a tokenizer fails on it), and a value
that is not an object. Validation (``validated``) checks it against the shared request models, a 400 naming
the first bad field; a server run with ``--ignore-unknown-fields`` first drops the top-level fields the model does
not define and logs them (vLLM's behaviour, always on there; here an option, since OpenAI answers such a field
with a 400).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shoal.protocol.errors import from_validation_errors, invalid_request, payload_too_large

Receive = Callable[[], Awaitable[Mapping[str, Any]]]  # ASGI's, without depending on a server package here
M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)


class ClientDisconnected(Exception):
    """The client left before its body was complete: there is nobody left to answer."""


async def read_body(
    receive: Receive, declared_length: bytes | str | None, limit: int, drain_limit: int | None = None
) -> bytes:
    """The whole body, or a 413 once it passes ``limit`` bytes (at ``drain_limit``, if given, having read that far).

    A ``Content-Length`` past the point where reading would stop is refused before anything is read.
    """
    stop_at = limit if drain_limit is None else max(limit, drain_limit)
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > stop_at:
        raise payload_too_large(limit)
    body = bytearray()
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > stop_at:
            raise payload_too_large(limit)
        if size <= limit:
            body += chunk
        if not message.get("more_body", False):
            break
    if size > limit:
        raise payload_too_large(limit)
    return bytes(body)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a dict, or an ``APIError`` 400 (code ``invalid_json``) saying why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_request(
            f"Malformed JSON body: not valid UTF-8 (invalid byte at offset {exc.start}).", code="invalid_json"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid_request(
            f"Malformed JSON body: {exc.msg} (line {exc.lineno}, column {exc.colno}).", code="invalid_json"
        ) from None
    except RecursionError:
        raise invalid_request("Malformed JSON body: nested too deeply.", code="invalid_json") from None
    except ValueError as exc:  # past sys.get_int_max_str_digits()
        raise invalid_request(f"Malformed JSON body: {exc}.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    if "\\u" in text and _has_lone_surrogate(data):
        raise invalid_request(
            "Malformed JSON body: a string escapes half of a surrogate pair (not text).", code="invalid_json"
        )
    return data


def _has_lone_surrogate(data: dict[str, Any]) -> bool:
    """Only reached when the body has ``\\u`` escapes: UTF-8 has no encoding for a lone surrogate."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except RecursionError:  # too deep to check here: the request models refuse such nesting anyway
        return False
    return False


def validated(model: type[M], data: dict[str, Any], ignore_unknown_fields: bool = False) -> M:
    """``data`` as one of the shared request models, or a 400 naming the first field that is wrong; with
    ``ignore_unknown_fields``, a top-level field the model does not define is dropped (and logged) instead."""
    if ignore_unknown_fields:
        data = without_unknown_fields(model, data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_errors(exc.errors()) from None


def without_unknown_fields(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` less the fields ``model`` does not know (``data`` itself if none); those it refuses by name
    (``refused_fields``) stay."""
    known = set(model.model_fields) | set(getattr(model, "refused_fields", {}))
    unknown = sorted(key for key in data if key not in known)
    if not unknown:
        return data
    log.warning("the request's fields %s are not defined by the API; ignored (--ignore-unknown-fields)", unknown)
    return {key: value for key, value in data.items() if key in known}
