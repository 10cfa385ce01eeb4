"""FakeBackend: the fastest engine stand-in we can write, for measuring what a router itself costs.

A bare asyncio HTTP/1.1 server (keep-alive, uvloop): ``/ready`` and ``/health`` answer ok, ``/v1/models``
lists ``--model``, and both completion endpoints answer as a JSON body or as ``--chunks`` SSE events: at once,
or one event every ``--chunk-interval-ms`` like an engine's decode steps (so concurrent streams last as long as
real ones and a router is measured at the load they really bring). It generates nothing: the point is that all
the time a request spends beyond going direct is the router's.

    .venv/bin/python bench/gateway_fake_backend.py --port 9001
"""

from __future__ import annotations

import argparse
import asyncio
import json

import uvloop


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class FakeBackend(asyncio.Protocol):
    def __init__(self, model: str, chunks: int, interval_s: float = 0.0) -> None:
        self.buffer = bytearray()
        self.interval_s = interval_s
        self.models = _response(
            "200 OK",
            "application/json",
            json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode(),
        )
        self.ok = _response("200 OK", "text/plain", b"ok")
        choice = {"index": 0, "text": " tok", "finish_reason": None}
        event = (
            b"data: "
            + json.dumps({"id": "cmpl-fake", "object": "text_completion", "model": model, "choices": [choice]}).encode()
            + b"\n\n"
        )
        self.stream_head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        self.events = [_chunk(event)] * chunks + [_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]
        self.json = _response(
            "200 OK",
            "application/json",
            json.dumps(
                {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "model": model,
                    "choices": [{"index": 0, "text": " tok" * chunks, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": chunks, "total_tokens": chunks + 1},
                }
            ).encode(),
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.buffer[:end]).decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            path = head.split(" ", 2)[1]
            if path.startswith("/v1/") and (b'"stream": true' in body or b'"stream":true' in body):
                self._stream()
            else:
                self.transport.write(self._answer(path))  # type: ignore[attr-defined]

    def _answer(self, path: str) -> bytes:
        if path == "/v1/models":
            return self.models
        return self.json if path.startswith("/v1/") else self.ok

    def _stream(self) -> None:
        if self.interval_s <= 0:
            self.transport.write(self.stream_head + b"".join(self.events))  # type: ignore[attr-defined]
            return
        self.transport.write(self.stream_head)  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        for i, event in enumerate(self.events):
            loop.call_later(self.interval_s * (i + 1), self._send, event)

    def _send(self, data: bytes) -> None:
        if not self.transport.is_closing():  # type: ignore[attr-defined]
            self.transport.write(data)  # type: ignore[attr-defined]


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of the chunked transfer encoding."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def serve(port: int, model: str, chunks: int, interval_s: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FakeBackend(model, chunks, interval_s), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--chunk-interval-ms", type=float, default=0.0, help="pace SSE events like decode steps")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.model, args.chunks, args.chunk_interval_ms / 1000))


if __name__ == "__main__":
    main()
