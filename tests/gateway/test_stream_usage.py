"""The usage a stream reports, read by the gateway as the chunks pass (``shoal.gateway.usage``): a Responses stream's
last event, however the reads split it, and a chat usage chunk the gateway asked for, taken out."""

from __future__ import annotations

import json

from shoal.gateway import usage
from shoal.gateway.usage import StreamUsage
from shoal.protocol.responses_api import InputTokensDetails, LifecycleEvent, ResponseObject, ResponseUsage
from shoal.protocol.sse import DONE, sse_typed_event


def compact(payload: object) -> str:
    """JSON as the engine writes it (pydantic's ``model_dump_json``: no spaces)."""
    return json.dumps(payload, separators=(",", ":"))


def completed_event(text: str, total: int) -> bytes:
    used = ResponseUsage(
        input_tokens=3, input_tokens_details=InputTokensDetails(), output_tokens=total - 3, total_tokens=total
    )
    response = ResponseObject(id="resp_1", created_at=1, status="completed", model="m", usage=used)
    event = LifecycleEvent(type="response.completed", sequence_number=9, response=response)
    payload = json.loads(event.model_dump_json())
    payload["response"]["output"] = [{"type": "message", "content": [{"type": "output_text", "text": text}]}]
    return f"event: response.completed\ndata: {compact(payload)}\n\n".encode()


def test_a_responses_last_event_split_across_reads_is_read_whole() -> None:
    created = sse_typed_event(
        LifecycleEvent(
            type="response.created",
            sequence_number=0,
            response=ResponseObject(id="resp_1", created_at=1, status="in_progress", model="m"),
        ),
        "response.created",
    ).encode()
    last = completed_event("word " * 5000, 5003)
    reads = [created + last[:7], last[7:20_000], last[20_000:]]
    reader = StreamUsage()
    seen = [reader.take(read) for read in reads]
    assert [chunk for chunk, _ in seen] == reads  # passed on untouched
    assert [used for _, used in seen] == [None, None, 5003]
    assert reader.pending == b""


def test_a_chat_usage_chunk_the_gateway_asked_for_is_taken_out() -> None:
    looks_like_usage = {"choices": [{"delta": {"content": '"usage":{'}}]}
    token = ("data: " + compact(looks_like_usage) + "\n\n").encode()
    asked = "data: " + compact({"choices": [], "usage": {"completion_tokens": 3, "total_tokens": 5}}) + "\n\n"
    reader = StreamUsage(strip=True)
    assert reader.take(token) == (token, None)  # a token's text cannot look like the usage object
    assert reader.take((asked + DONE).encode()) == (DONE.encode(), 5)


def test_an_endless_event_is_given_up_past_the_bound(monkeypatch) -> None:
    monkeypatch.setattr(usage, "MAX_PENDING_BYTES", 1000)
    reader = StreamUsage()
    reader.take(b'data: {"usage":{' + b"x" * 2000)
    assert reader.pending == b""
    assert reader.take(completed_event("hi", 7)) == (completed_event("hi", 7), 7)
