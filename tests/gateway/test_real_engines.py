"""The gateway in front of real ``shoal serve`` engines (tiny random model), driven by the official openai client."""

from __future__ import annotations

import logging
import time

import httpx
import openai
import pytest
from gateway_harness import EngineProcess, GatewayHandle
from support.polling import eventually

from shoal.local import metric
from shoal.model_registry import resolve_model
from shoal.protocol.block_hash import adapter_extra_key, hash_blocks
from shoal.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(240)

SYSTEM = ("You are the assistant of the Shoal inference fleet. Answer briefly, precisely and politely. " * 6).strip()


@pytest.fixture
def fleet_gateway(engines, tiny_model_dir, gateways) -> GatewayHandle:
    handle = gateways([e.url for e in engines[:2]], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
    handle.wait_healthy(2)
    eventually(lambda: handle.gateway.prompts.tokenizer("tiny") is not None, 30, "the tokenizer")
    return handle


def client(handle: GatewayHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_openai_client_completions_chat_streaming_and_errors(fleet_gateway) -> None:
    api = client(fleet_gateway)
    assert [m.id for m in api.models.list().data] == ["tiny"]
    completion = api.completions.create(model="tiny", prompt="The capital of France is", max_tokens=5)
    assert completion.usage.completion_tokens == 5 and completion.choices[0].finish_reason == "length"
    chat = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert chat.usage.completion_tokens == 4
    chunks = list(
        api.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage.completion_tokens == 6
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content is not None) >= 1
    with pytest.raises(openai.NotFoundError):
        api.completions.create(model="gpt-4", prompt="x")
    with pytest.raises(openai.BadRequestError, match="max_tokens"):  # the engine's own 400 (context), passed on
        api.completions.create(model="tiny", prompt="x", max_tokens=100_000)


def check_repeat_hits_the_cache(
    handle: GatewayHandle, tokenizer: Tokenizer, model: str, chat: bool, block_size: int = 16, extra_key: bytes = b""
) -> None:
    """The hashes the gateway computes are the ones the engine publishes; a repeat lands on the holder."""
    api = client(handle)
    question = f"{'chat' if chat else 'completion'} {time.monotonic_ns()}"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]

    def send() -> int:
        if chat:
            out = api.chat.completions.create(model=model, messages=messages, max_tokens=2)
        else:
            out = api.completions.create(model=model, prompt=SYSTEM + question, max_tokens=2)
        details = out.usage.prompt_tokens_details
        return details.cached_tokens if details else 0

    if chat:
        ids = tokenizer.encode(tokenizer.apply_chat_template(messages), add_special_tokens=False)
    else:
        ids = tokenizer.encode(SYSTEM + question)
    hashes = hash_blocks(ids, block_size, extra_key)
    assert len(hashes) >= 4
    send()
    replicas = handle.gateway.fleet.replicas.values()
    eventually(
        lambda: any(r.index.synced and all(h in r.index.cached for h in hashes) for r in replicas),
        10,
        "the engine's /kv/events to report the prompt's blocks",
    )
    cached = send()
    assert cached >= block_size * (len(hashes) - 1)  # the engine itself reports the reuse
    metrics = httpx.get(handle.url + "/metrics").text
    assert (
        f'shoal_gateway_routing_decisions_total{{model="{model}",policy="prefix-aware",reason="prefix_hit"}}' in metrics
    )


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
def test_gateway_hashes_match_the_engines_blocks_and_route_repeats_to_the_cache(
    fleet_gateway, tiny_model_dir, chat: bool
) -> None:
    check_repeat_hits_the_cache(fleet_gateway, Tokenizer.from_hf_dir(tiny_model_dir), "tiny", chat)


def test_an_engine_with_another_block_size_is_hashed_for_with_its_own_and_shown(
    gateways, tiny_model_dir, tmp_path, caplog
) -> None:
    """The gateway expects 16-token blocks (its default); an engine of 8 announces it, gets prompts hashed in
    8-token blocks (so routing finds its cache) and shows as a mismatch in a metric and a warning."""
    engine = EngineProcess(
        str(tiny_model_dir), tmp_path / "engine-8.log", "tiny", "--num-kv-blocks", "256", "--block-size", "8"
    ).wait_ready()
    try:
        with caplog.at_level(logging.WARNING, logger="shoal.gateway.gateway"):
            handle = gateways([engine.url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
            handle.wait_healthy(1)
            eventually(lambda: handle.gateway.prompts.tokenizer("tiny") is not None, 30, "the tokenizer")
            check_repeat_hits_the_cache(handle, Tokenizer.from_hf_dir(tiny_model_dir), "tiny", chat=False, block_size=8)
        assert metric(handle.url, "shoal_gateway_backend_block_size_mismatch") == 8
        assert any("announces 8-token KV blocks, the gateway expects 16" in r.getMessage() for r in caplog.records)
    finally:
        engine.stop()


def test_a_lora_adapter_is_routed_and_hashed_as_its_engine_hashes(gateways, tiny_model_dir, tmp_path) -> None:
    """An engine lists its adapter with ``parent``; the gateway serves the adapter as a model of its own, tokenizes
    its prompts with the parent's tokenizer and hashes them with the adapter's extra key, so a repeat finds the
    blocks the engine published for that adapter (and the base model's blocks of the same prompt stay apart)."""
    from lora_adapters import write_adapter  # tests/engine, on the path since tiny_model_dir

    adapter = write_adapter(tiny_model_dir, tmp_path / "adapter", 1, r=4, target_modules=["q_proj", "v_proj"])
    engine = EngineProcess(
        str(tiny_model_dir), tmp_path / "engine-lora.log", "tiny", "--num-kv-blocks", "256", "--enable-lora",
        "--max-lora-rank", "4", "--lora-modules", f"sql={adapter}",
    ).wait_ready()  # fmt: skip
    try:
        handle = gateways([engine.url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)})
        handle.wait_healthy(1)
        eventually(lambda: handle.gateway.prompts.tokenizer("tiny") is not None, 30, "the tokenizer")
        assert sorted(m.id for m in client(handle).models.list().data) == ["sql", "tiny"]
        tokenizer = Tokenizer.from_hf_dir(tiny_model_dir)
        check_repeat_hits_the_cache(handle, tokenizer, "sql", chat=False, extra_key=adapter_extra_key("sql"))
    finally:
        engine.stop()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_smollm2_end_to_end_through_the_gateway(gateways, tmp_path) -> None:
    """The bundled SmolLM2 (GGUF): its tokenizer and chat template agree with the engine's block by block."""
    engine = EngineProcess("smollm2-135m", tmp_path / "smollm2.log", "smollm2-135m").wait_ready(timeout=300)
    try:
        handle = gateways([engine.url], byte_tokenized=(), tokenizers={"smollm2-135m": "smollm2-135m"})
        handle.wait_healthy(1)
        eventually(lambda: handle.gateway.prompts.tokenizer("smollm2-135m") is not None, 120, "the GGUF tokenizer")
        reply = client(handle).chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=12,
            temperature=0,
        )
        assert "Paris" in reply.choices[0].message.content
        tokenizer = Tokenizer.from_source(resolve_model("smollm2-135m"))
        check_repeat_hits_the_cache(handle, tokenizer, "smollm2-135m", chat=True)
    finally:
        engine.stop()


def test_a_client_disconnect_aborts_the_engine_request_and_frees_its_blocks(fleet_gateway, engines) -> None:
    before = sum(metric(e.url, "shoal_engine_requests_aborted_total") for e in engines[:2])
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 900, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", fleet_gateway.url + "/v1/completions", json=body, timeout=30) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i == 10:
                break
    eventually(
        lambda: sum(metric(e.url, "shoal_engine_requests_aborted_total") for e in engines[:2]) == before + 1,
        10,
        "the engine to count the abort",
    )
    for engine in engines[:2]:
        eventually(
            lambda engine=engine: (
                metric(engine.url, "shoal_engine_requests_running") == 0
                and metric(engine.url, "shoal_engine_kv_cache_usage_ratio") == 0
            ),
            10,
            "the engine's KV blocks to be freed",
        )


def test_an_engine_killed_mid_stream_gives_a_clean_error_and_traffic_moves_on(
    engines, tiny_model_dir, gateways
) -> None:
    victim, survivor = engines[2], engines[0]
    handle = gateways(
        [victim.url, survivor.url], byte_tokenized=(), tokenizers={"tiny": str(tiny_model_dir)}, policy="round-robin"
    )
    handle.wait_healthy(2)
    api = client(handle)
    replica = handle.gateway.fleet.replicas[victim.url]
    for _ in range(2):
        stream = api.completions.create(
            model="tiny", prompt="Once upon a time", max_tokens=900, stream=True, extra_body={"ignore_eos": True}
        )
        next(iter(stream))
        if replica.in_flight == 1:
            break
        stream.close()
    assert replica.in_flight == 1
    victim.stop()
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        for _ in stream:
            pass
    for _ in range(4):
        assert api.completions.create(model="tiny", prompt="hello", max_tokens=2).usage.completion_tokens == 2
    assert not replica.healthy
