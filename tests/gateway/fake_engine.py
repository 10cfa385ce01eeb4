"""FakeEngine: a stand-in for an engine replica, for the proxy behaviours a real engine won't show on demand.

It answers the engine's API shapes (``/ready``, ``/v1/models``, completions with and without SSE, ``/kv/events``)
and can be told to misbehave: answer 503, answer garbage, stall before its first byte, or stream slowly. It
records what reached it (headers, bodies) and counts streams whose client went away. Tests that need real
tokens, real KV blocks and real abort accounting use real ``shoal serve`` processes instead.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from shoal.protocol.kv_events import KVEvent

Mode = Literal["ok", "unavailable", "garbage", "garbage_stream", "stall"]


class FakeEngine:
    def __init__(self, name: str, models: tuple[str, ...] = ("tiny",)) -> None:
        self.name = name
        self.models = models
        self.mode: Mode = "ok"
        self.ready = True
        self.ready_route = True  # False: no /ready at all, only /health (vLLM, llama-server)
        self.tokens = 4
        self.token_delay = 0.0
        self.requests: list[dict[str, Any]] = []
        self.disconnects = 0
        self.completed = 0
        self.kv_snapshot: list[int] = []
        self.kv_events: list[KVEvent] = []
        self.card: dict[str, Any] = {}  # more fields for each model card (a Shoal engine's scheduler limits)
        self.app = Starlette(
            routes=[
                Route("/ready", self._ready),
                Route("/health", self._ready),
                Route("/v1/models", self._models),
                Route("/v1/completions", self._generate, methods=["POST"]),
                Route("/v1/chat/completions", self._generate, methods=["POST"]),
                Route("/kv/events", self._kv_events),
            ]
        )

    async def _ready(self, request: Request) -> Response:
        if request.url.path == "/ready" and not self.ready_route:
            return PlainTextResponse("Not Found", status_code=404)
        return PlainTextResponse("ok" if self.ready else "not ready", status_code=200 if self.ready else 503)

    async def _models(self, _: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model", **self.card} for m in self.models]}
        )

    def _chunk(self, i: int) -> bytes:
        body = {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.models[0],
            "choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}],
            "engine": self.name,
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    async def _generate(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body})
        if self.mode == "unavailable":
            return JSONResponse(
                {"error": {"message": "queue full", "type": "service_unavailable_error", "param": None, "code": None}},
                status_code=503,
                headers={"Retry-After": "3"},
            )
        if self.mode == "garbage":
            return PlainTextResponse("<html>500 oops</html>", status_code=200, media_type="application/json")
        if self.mode == "stall":  # hold the request until its client goes away, as an engine aborts it
            while not await request.is_disconnected():
                await asyncio.sleep(0.02)
            self.disconnects += 1
            return Response(status_code=499)
        if body.get("stream"):
            usage = (body.get("stream_options") or {}).get("include_usage", False)
            return StreamingResponse(self._stream(usage), media_type="text/event-stream")
        self.completed += 1
        text = "".join(f" t{i}" for i in range(self.tokens))
        return JSONResponse(
            {
                "id": "cmpl-fake",
                "object": "text_completion",
                "created": int(time.time()),
                "model": body["model"],
                "engine": self.name,
                "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": None}],
                "usage": self._usage(),
            },
            headers={"X-Request-Id": request.headers.get("x-request-id", "")},
        )

    async def _stream(self, usage: bool = False):  # type: ignore[no-untyped-def]
        try:
            for i in range(self.tokens):
                if self.mode == "garbage_stream" and i == 1:
                    yield b"\x00\xffnot an event\n"
                yield self._chunk(i)
                await asyncio.sleep(self.token_delay)
            if usage:  # as the engine reports it: an event of its own, with no choices
                report = {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": self.models[0],
                    "choices": [],
                    "usage": self._usage(),
                }
                yield b"data: " + json.dumps(report, separators=(",", ":")).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
            self.completed += 1
        except asyncio.CancelledError:
            self.disconnects += 1
            raise

    def _usage(self) -> dict[str, int]:
        return {"prompt_tokens": 1, "completion_tokens": self.tokens, "total_tokens": 1 + self.tokens}

    async def _kv_events(self, _: Request) -> Response:
        async def events():  # type: ignore[no-untyped-def]
            first = KVEvent(type="snapshot", seq=0, hashes=list(self.kv_snapshot), block_size=16, engine_id=self.name)
            yield f"data: {first.model_dump_json()}\n\n".encode()
            sent = len(self.kv_events)  # a new follower gets the snapshot, then only later events
            while True:
                while sent < len(self.kv_events):
                    yield f"data: {self.kv_events[sent].model_dump_json()}\n\n".encode()
                    sent += 1
                await asyncio.sleep(0.02)

        return StreamingResponse(events(), media_type="text/event-stream")
