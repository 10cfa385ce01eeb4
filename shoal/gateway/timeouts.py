"""The time limits of one request at the gateway: connect, first token, between tokens, and the whole request.

A request meets them in order. Connecting to a replica is bounded by the connect timeout (the pool's); a
refused or slow connect is retried on another replica. Then the first byte of the response body must come
within the first-token timeout: the engine sends a stream's first event with its first token, so for a stream
this is the time to first token; a non-streaming response's first byte is its whole body, bounded only by the
request limit. Missing it, the gateway closes the exchange (the engine aborts the request) and tries another
replica while attempts and the retry budget last, else answers 504. After the first byte, each next chunk must
come within the inter-token timeout; missing it ends the client's stream with an error event and closes the
upstream. Over all of it runs the request limit: the server's, or shorter if the client asks for less in the
``X-Request-Timeout`` header (seconds), never longer.

``Deadline`` is pure (the caller passes ``now``), so its rule is tested without a clock. The default limits live in
``shoal.protocol.gateway_timeouts``, which the CRD's defaults share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

REQUEST_TIMEOUT_HEADER = "X-Request-Timeout"

TimeoutCode = Literal["first_token_timeout", "inter_token_timeout", "request_timeout"]


@dataclass(frozen=True)
class Wait:
    """How long to wait for the next byte, and which limit ends the wait if nothing comes."""

    seconds: float
    code: TimeoutCode


def client_limit(header: bytes | None, server_limit_s: float) -> float:
    """The request's limit in seconds: the client's ``X-Request-Timeout`` if given (bounded by the server's);
    ``ValueError`` with the message for the client if the header is not a positive number."""
    if header is None:
        return server_limit_s
    try:
        asked = float(header.decode("latin-1"))
    except ValueError:
        asked = math.nan
    if not math.isfinite(asked) or asked <= 0:
        raise ValueError(
            f"{REQUEST_TIMEOUT_HEADER} must be a positive number of seconds, got {header[:32].decode('latin-1')!r}."
        )
    return min(asked, server_limit_s)


@dataclass(frozen=True)
class Deadline:
    """One request's limits, anchored at ``end`` (a monotonic instant: arrival plus ``limit_s``)."""

    end: float
    limit_s: float
    first_token_s: float
    inter_token_s: float

    @classmethod
    def starting(cls, now: float, limit_s: float, first_token_s: float, inter_token_s: float) -> Deadline:
        return cls(now + limit_s, limit_s, first_token_s, inter_token_s)

    def first_byte(self, now: float, stream: bool) -> Wait:
        """The wait for a response's first body byte (a stream's first token; a whole non-streaming body)."""
        left = self.end - now
        if stream and self.first_token_s < left:
            return Wait(self.first_token_s, "first_token_timeout")
        return Wait(left, "request_timeout")

    def next_chunk(self, now: float) -> Wait:
        """The wait for the next chunk of a response already started."""
        left = self.end - now
        if self.inter_token_s < left:
            return Wait(self.inter_token_s, "inter_token_timeout")
        return Wait(left, "request_timeout")

    def message(self, code: TimeoutCode) -> str:
        """What the client is told when ``code``'s limit runs out, naming the limit."""
        seconds = {
            "first_token_timeout": self.first_token_s,
            "inter_token_timeout": self.inter_token_s,
            "request_timeout": self.limit_s,
        }[code]
        return _MESSAGES[code].format(s=round(seconds, 3))


_MESSAGES: dict[TimeoutCode, str] = {
    "first_token_timeout": "No backend produced a first token within {s:g} s.",
    "inter_token_timeout": "The backend produced no token for {s:g} s; the stream was ended.",
    "request_timeout": "The request ran past its time limit of {s:g} s.",
}
