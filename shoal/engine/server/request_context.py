"""Request ids: taken from ``X-Request-Id`` (so the gateway's id follows the request) or made up, echoed in
the response, and stamped on every log line written while the request is handled.

A pure ASGI middleware rather than Starlette's ``BaseHTTPMiddleware``: the latter wraps ``receive`` and
would hide client disconnects from the streaming responses that must notice them.
"""

from __future__ import annotations

import contextvars
import logging
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-request-id"
_VALID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def current_request_id() -> str:
    return request_id_var.get()


class RequestIdLogFilter(logging.Filter):
    """Adds ``record.request_id`` so formatters can print it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class RequestIdMiddleware:
    """Sets the request id for the handler and adds it to the response headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == HEADER.encode()), "")
        request_id = given if _VALID.match(given) else uuid.uuid4().hex
        token = request_id_var.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (HEADER.encode(), request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)
