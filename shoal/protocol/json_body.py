"""A request body read as a JSON object, the same way by the engine server and the gateway.

Every way a body can fail to be one becomes a 400 naming the problem: bytes that are not UTF-8, malformed JSON,
JSON nested deeper than the decoder's recursion limit (Python's ``json`` raises ``RecursionError`` there, which
would otherwise surface as a 500), and a value that is not an object.
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
    if not isinstance(data, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    return data
