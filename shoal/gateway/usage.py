"""What a request really used, read from the engine's own report, to settle its tenant's token charge.

A non-streaming response carries ``usage``, and so does a Responses stream's last event (``response.completed``,
under ``response``). A completions or chat stream carries it only in a last event that the client asks for
with ``stream_options.include_usage``; when a client did not, the gateway asks the engine for it anyway
(``with_usage_requested``) and takes that event out of the stream before it reaches the client
(``take_usage``), so the client sees exactly the stream it asked for. Only an event whose JSON has a
non-null ``usage`` object is touched: a token's text cannot contain the raw bytes ``"usage":{`` (its quotes
are escaped), so the search costs one scan of each chunk and nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_USAGE = b'"usage":{'
MAX_PENDING_BYTES = 16 * 1024 * 1024  # an unfinished event kept for its usage; past this, the estimate stays charged


def with_usage_requested(data: dict[str, Any]) -> bytes | None:
    """The body to send instead, asking for the usage event, when a streaming request does not ask for it."""
    options = data.get("stream_options") or {}
    if not data.get("stream") or options.get("include_usage"):
        return None
    return json.dumps({**data, "stream_options": {**options, "include_usage": True}}).encode()


def total_tokens(report: Any) -> int | None:
    """``usage.total_tokens`` of a decoded response or event (a Responses event's under ``response``), if it has one."""
    if isinstance(report, dict) and isinstance(report.get("response"), dict):
        report = report["response"]
    usage = report.get("usage") if isinstance(report, dict) else None
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and tokens >= 0 else None


def take_usage(chunk: bytes, strip: bool) -> tuple[bytes, int | None]:
    """The chunk (without its usage event if ``strip``) and the total tokens that event reports."""
    if _USAGE not in chunk:
        return chunk, None
    kept, used = [], None
    for event in chunk.split(b"\n\n"):
        data = event.find(b"data: {")  # after the event's name line, if it has one (the Responses API's)
        if data >= 0 and (data == 0 or event[data - 1 : data] == b"\n") and _USAGE in event:
            try:
                found = total_tokens(json.loads(event[data + 6 :]))
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                found = None
            if found is not None:
                used = found
                if strip:
                    continue
        kept.append(event)
    return b"\n\n".join(kept), used


@dataclass
class StreamUsage:
    """The usage a stream reports, read from its chunks as they pass. A Responses stream's last event carries the
    whole response, so a long one arrives split across reads: the unfinished end of each chunk is kept (up to
    ``MAX_PENDING_BYTES``) and read again with the next. A usage event the gateway strips is a chat or completions
    usage chunk of its own request, far smaller than a read; those are looked for within each chunk."""

    strip: bool = False
    pending: bytes = b""

    def take(self, chunk: bytes) -> tuple[bytes, int | None]:
        """The chunk to pass on and the total tokens an event completed by it reports."""
        if self.strip:
            return take_usage(chunk, True)
        if not self.pending and _USAGE not in chunk and chunk.endswith(b"\n\n"):
            return chunk, None  # the common case: whole events, none with a usage
        joined = self.pending + chunk
        end = joined.rfind(b"\n\n") + 2
        complete, self.pending = (joined[:end], joined[end:]) if end >= 2 else (b"", joined)
        if len(self.pending) > MAX_PENDING_BYTES:
            self.pending = b""
        return chunk, take_usage(complete, False)[1]
