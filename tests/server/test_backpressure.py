"""A client that reads slowly never holds back the others, and loses nothing of its own stream."""

from __future__ import annotations

import json
import socket
import threading
import time

import openai
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

pytestmark = pytest.mark.timeout(180)
M = TINY_MODEL_NAME
BODY = {"model": M, "prompt": "The slow reader", "max_tokens": 200, "temperature": 0, "ignore_eos": True}


class SlowReader:
    """A raw socket with a tiny receive buffer that reads one small piece a second: the server's writes to it
    block almost at once, so its SSE stream has to back up inside the server."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        self.sock.connect((host, int(port)))
        payload = json.dumps({**BODY, "stream": True}).encode()
        head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        self.sock.sendall(head.encode() + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        self.received = bytearray()
        self.done = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stop.is_set():
            piece = self.sock.recv(256)
            if not piece:
                break
            self.received += piece
            if b"data: [DONE]" in self.received:
                self.done.set()
                return
            time.sleep(1.0)

    def read_rest(self) -> str:
        self.stop.set()
        self.thread.join()
        self.sock.settimeout(30)
        while b"data: [DONE]" not in self.received:
            piece = self.sock.recv(65536)
            if not piece:
                break
            self.received += piece
        self.sock.close()
        body = self.received.split(b"\r\n\r\n", 1)[1].decode()
        texts = []
        for line in body.splitlines():  # chunked framing lines are hex sizes; SSE lines start with "data: {"
            if line.startswith("data: {"):
                texts.append(json.loads(line[6:])["choices"][0]["text"])
        return "".join(texts)


def test_slow_reader_does_not_slow_sixteen_fast_requests(server: ServeProcess, client: openai.OpenAI) -> None:
    greedy = {k: v for k, v in BODY.items() if k != "ignore_eos"}
    expected = client.completions.create(**greedy, extra_body={"ignore_eos": True}).choices[0].text  # type: ignore[arg-type]
    slow = SlowReader(server.url)
    time.sleep(0.5)
    results: list[int] = []

    def fast(i: int) -> None:
        out = client.completions.create(model=M, prompt=f"fast {i}", max_tokens=32, extra_body={"ignore_eos": True})
        results.append(out.usage.completion_tokens)

    threads = [threading.Thread(target=fast, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == [32] * 16
    assert not slow.done.is_set(), "the slow reader finished first: it was not slow enough to test anything"
    assert slow.read_rest() == expected  # coalesced chunks, same text
