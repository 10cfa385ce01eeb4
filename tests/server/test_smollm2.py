"""End to end with the real model: SmolLM2 behind ``shoal serve``, the official async client, 64 streams."""

from __future__ import annotations

import asyncio

import openai
import pytest
from serve_harness import ServeProcess

from shoal.local import metric

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_knows_the_capital_of_france(smollm2_server: ServeProcess) -> None:
    client = openai.OpenAI(base_url=f"{smollm2_server.url}/v1", api_key="unused", max_retries=0)
    out = client.chat.completions.create(
        model="smollm2-135m",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24,
        temperature=0,
    )
    assert "Paris" in out.choices[0].message.content


def test_sixty_four_concurrent_streaming_chats_complete(smollm2_server: ServeProcess) -> None:
    url = smollm2_server.url
    ttft_before = metric(url, "shoal_engine_time_to_first_token_seconds_count")
    e2e_before = metric(url, "shoal_engine_e2e_request_latency_seconds_count")
    itl_before = metric(url, "shoal_engine_inter_token_latency_seconds_count")

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[str | None, int]:
        stream = await client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": f"Write a sentence about the number {i}."}],
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
        reason, tokens = None, 0
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                reason = chunk.choices[0].finish_reason
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
        return reason, tokens

    async def run() -> list[tuple[str | None, int]]:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300) as client:
            return await asyncio.gather(*(one(client, i) for i in range(64)))

    results = asyncio.run(run())
    assert all(reason in ("stop", "length") and 1 <= tokens <= 16 for reason, tokens in results), results
    assert metric(url, "shoal_engine_time_to_first_token_seconds_count") - ttft_before == 64
    assert metric(url, "shoal_engine_e2e_request_latency_seconds_count") - e2e_before == 64
    assert metric(url, "shoal_engine_inter_token_latency_seconds_count") - itl_before == sum(t - 1 for _, t in results)
    assert metric(url, "shoal_engine_requests_running") == 0
    assert metric(url, "shoal_engine_kv_cache_usage_ratio") == 0
