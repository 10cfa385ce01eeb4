"""One streamed completion or chat request, timed from the client's side (what a user experiences)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from shoal.loadgen.datasets import BenchRequest


@dataclass
class RequestResult:
    """Timings in seconds; ``itls`` are the gaps between consecutive chunks that carried text."""

    success: bool
    ttft: float = 0.0
    e2e: float = 0.0
    itls: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str = ""
    retries: int = 0  # sends again after the server closed a kept-alive connection before responding

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
ENDPOINTS = (COMPLETIONS, CHAT)


def request_body(endpoint: str, model: str, req: BenchRequest) -> dict[str, Any]:
    """The streamed request for ``endpoint``: the prompt as is, or as one user message (the server's chat template
    adds its tokens); ``ignore_eos`` makes its length exactly ``max_tokens``."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": req.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == CHAT:
        return {**body, "messages": [{"role": "user", "content": req.prompt}]}
    return {**body, "prompt": req.prompt}


def _text(endpoint: str, choice: dict[str, Any]) -> str:
    """The text a streamed chunk's choice carries: ``delta.content`` in chat, ``text`` in completions."""
    if endpoint == CHAT:
        return str((choice.get("delta") or {}).get("content") or "")
    return str(choice.get("text") or "")


async def send_request(
    client: httpx.AsyncClient, url: str, model: str, req: BenchRequest, endpoint: str = COMPLETIONS
) -> RequestResult:
    """Streams one request to ``endpoint`` (``COMPLETIONS`` or ``CHAT``) and times its chunks, from the first send.

    A request the server closed its connection on before any byte of a response is sent once more on a new
    connection (counted in ``retries``): that is a kept-alive connection the server closed as the client reused
    it, not the request failing (llama-server closes idle ones, and a benchmark counted that against it)."""
    body = request_body(endpoint, model, req)
    result = RequestResult(success=False)
    start = time.perf_counter()
    while True:
        responded = False
        try:
            async with client.stream("POST", url.rstrip("/") + endpoint, json=body) as response:
                responded = True
                await _read_stream(response, endpoint, result, start)
        except httpx.RemoteProtocolError as exc:
            if not responded and not result.retries:
                result.retries += 1
                continue
            result.error = f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        break
    if not result.error:
        result.e2e = time.perf_counter() - start
        result.success = True
    return result


async def _read_stream(response: httpx.Response, endpoint: str, result: RequestResult, start: float) -> None:
    """Times the chunks of one streamed response into ``result``; sets ``result.error`` if the server sent one."""
    if response.status_code != 200:
        result.error = f"HTTP {response.status_code}: {(await response.aread()).decode(errors='replace')[:200]}"
        return
    last = start
    async for line in response.aiter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            result.error = str(chunk["error"].get("message"))
            return
        if chunk.get("usage"):
            result.prompt_tokens = chunk["usage"]["prompt_tokens"]
            result.output_tokens = chunk["usage"]["completion_tokens"]
        if chunk.get("choices") and _text(endpoint, chunk["choices"][0]):
            now = time.perf_counter()
            if result.ttft == 0.0:
                result.ttft = now - start
            else:
                result.itls.append(now - last)
            last = now
