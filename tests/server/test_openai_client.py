"""The official OpenAI client, unchanged, against a real ``shoal serve``."""

from __future__ import annotations

import openai
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

from shoal.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(120)
M = TINY_MODEL_NAME


def test_models_lists_the_served_name(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [M]


def test_completion_counts_tokens_and_stops_at_the_limit(client: openai.OpenAI, tiny_tokenizer: Tokenizer) -> None:
    out = client.completions.create(
        model=M, prompt="The capital of France is", max_tokens=7, extra_body={"ignore_eos": True}
    )
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 7
    assert out.usage.prompt_tokens == len(tiny_tokenizer.encode("The capital of France is"))
    assert out.usage.total_tokens == out.usage.prompt_tokens + 7


def test_streamed_text_equals_the_whole_response(client: openai.OpenAI) -> None:
    """Greedy decoding: streaming must only change how the same text is delivered."""
    kwargs = dict(model=M, prompt="Once upon a time", max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    whole = client.completions.create(**kwargs).choices[0].text  # type: ignore[arg-type]
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))  # type: ignore[arg-type]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_chat_and_chat_streaming_agree(client: openai.OpenAI) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a river."}]
    whole = client.chat.completions.create(model=M, messages=messages, max_tokens=12, temperature=0)  # type: ignore[arg-type]
    assert whole.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(
        model=M,
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},  # type: ignore[arg-type]
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_n_choices_share_the_prompt_and_count_it_once(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(
        model=M,
        messages=[{"role": "user", "content": "Tell me a story about a fox."}],
        max_tokens=8,
        n=3,
        seed=7,
        extra_body={"ignore_eos": True},
    )
    assert sorted(c.index for c in out.choices) == [0, 1, 2]
    assert out.usage.completion_tokens == 3 * 8
    single = client.chat.completions.create(
        model=M, messages=[{"role": "user", "content": "Tell me a story about a fox."}], max_tokens=1
    )
    assert out.usage.prompt_tokens == single.usage.prompt_tokens
    assert len({c.message.content for c in out.choices}) > 1  # seeds seed, seed+1, seed+2 differ


def test_seeded_sampling_repeats(client: openai.OpenAI) -> None:
    kwargs = dict(model=M, prompt="The river", max_tokens=10, temperature=1.0, seed=42)
    assert client.completions.create(**kwargs).choices[0].text == client.completions.create(**kwargs).choices[0].text  # type: ignore[arg-type]


def test_logprobs_in_both_formats(client: openai.OpenAI) -> None:
    comp = client.completions.create(model=M, prompt="Hello", max_tokens=4, logprobs=2, temperature=0)
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    assert all(v <= 0.0 for v in lp.token_logprobs)
    chat = client.chat.completions.create(
        model=M,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=3,
        logprobs=True,
        top_logprobs=3,
        temperature=0,
    )
    content = chat.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 3 for t in content)
    # greedy: the chosen token is the most likely one
    assert all(t.logprob >= max(a.logprob for a in t.top_logprobs) - 1e-6 for t in content)


def test_stop_sequence_ends_with_reason_stop(client: openai.OpenAI) -> None:
    free = client.completions.create(
        model=M, prompt="The", max_tokens=30, temperature=0, extra_body={"ignore_eos": True}
    )
    text = free.choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    if not stop.strip():
        pytest.fail(f"greedy text has no usable stop string: {text!r}")
    cut = client.completions.create(model=M, prompt="The", max_tokens=30, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.index(stop)]


def test_each_error_class(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="no-such-model", prompt="x")
    assert missing.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model=M, prompt="x", max_tokens=100_000)
    assert too_long.value.body["param"] == "max_tokens"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model=M, messages=[])
    assert empty.value.body["param"] == "messages"  # type: ignore[index]


def test_request_id_is_echoed_and_stages_are_timed(server: ServeProcess) -> None:
    import httpx

    r = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": M, "prompt": "Hi", "max_tokens": 2},
        headers={"X-Request-Id": "trace-abc-123"},
    )
    assert r.headers["x-request-id"] == "trace-abc-123"
    assert r.json()["id"] == "cmpl-trace-abc-123"
    stages = {part.split(";")[0] for part in r.headers["server-timing"].split(", ")}
    assert {"tokenize", "queue", "prefill", "decode", "e2e"} <= stages
    assert "trace-abc-123" in server.log()
    assert httpx.get(f"{server.url}/v1/models").headers["x-request-id"]  # made up when not given


def test_batched_prompts_each_get_n_choices(client: openai.OpenAI, tiny_tokenizer: Tokenizer) -> None:
    prompts = ["The fox", "A river runs"]
    out = client.completions.create(model=M, prompt=prompts, n=2, max_tokens=3, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]
    assert out.usage.prompt_tokens == sum(len(tiny_tokenizer.encode(p)) for p in prompts)
    assert out.usage.completion_tokens == 4 * 3
