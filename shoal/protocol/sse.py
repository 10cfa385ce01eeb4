"""Server-sent events as OpenAI streams them: each event one ``data: <json>`` line and a blank line, the stream
ending with ``data: [DONE]``; the Responses API's events are named by an ``event:`` line first and the stream ends
with its last event, no ``[DONE]``.

The engine writes its chunks, its error events and its KV events this way, and the gateway passes the engine's on
and writes its own error events (a stream it has to end) the same way, so a client reads one format whoever spoke.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

DONE = "data: [DONE]\n\n"


def sse_event(payload: BaseModel | Mapping[str, Any]) -> str:
    """One event carrying ``payload`` as JSON."""
    body = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
    return f"data: {body}\n\n"


def sse_typed_event(payload: BaseModel, event_type: str) -> str:
    """One event named by its type on an ``event:`` line before its data, as OpenAI streams the Responses API."""
    return f"event: {event_type}\n{sse_event(payload)}"
