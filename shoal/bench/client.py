"""One streamed completion request, timed from the client's side (what a user experiences)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from shoal.bench.datasets import BenchRequest


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

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


async def send_request(client: httpx.AsyncClient, url: str, model: str, req: BenchRequest) -> RequestResult:
    """Streams one ``/v1/completions`` request; ``ignore_eos`` makes its length exactly ``max_tokens``."""
    body = {
        "model": model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result = RequestResult(success=False)
    start = time.perf_counter()
    last = start
    try:
        async with client.stream("POST", f"{url.rstrip('/')}/v1/completions", json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread()).decode(errors='replace')[:200]}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    result.error = str(chunk["error"].get("message"))
                    return result
                if chunk.get("usage"):
                    result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    result.output_tokens = chunk["usage"]["completion_tokens"]
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    now = time.perf_counter()
                    if result.ttft == 0.0:
                        result.ttft = now - start
                    else:
                        result.itls.append(now - last)
                    last = now
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.e2e = time.perf_counter() - start
    result.success = True
    return result
