"""A request body read as a JSON object, the same way by the engine server and the gateway.

Every way a body can fail to be one becomes a 400 naming the problem: bytes that are not UTF-8, malformed JSON,
JSON nested deeper than the decoder's recursion limit (Python's ``json`` raises ``RecursionError`` there, which
would otherwise surface as a 500), an integer literal longer than Python converts (``ValueError``), a string
escaping half of a surrogate pair (``"\ud800"``: valid JSON, but no text: a tokenizer fails on it), and a value
that is not an object.
"""

from __future__ import annotations

import json
from typing import Any

from shoal.protocol.errors import invalid_request


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a dict, or an ``APIError`` 400 (code ``invalid_json``) saying why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_request(f"Malformed JSON body: not valid UTF-8 (invalid byte at offset {exc.start}).",
                              code="invalid_json") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid_request(f"Malformed JSON body: {exc.msg} (line {exc.lineno}, column {exc.colno}).",
                              code="invalid_json") from None
    except RecursionError:
        raise invalid_request("Malformed JSON body: nested too deeply.", code="invalid_json") from None
    except ValueError as exc:  # past sys.get_int_max_str_digits()
        raise invalid_request(f"Malformed JSON body: {exc}.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    if "\\u" in text and _has_lone_surrogate(data):
        raise invalid_request("Malformed JSON body: a string escapes half of a surrogate pair (not text).",
                              code="invalid_json")
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
