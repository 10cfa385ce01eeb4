"""OpenAI's request fields beyond the basics, against a real ``shoal serve`` with the official client: each
honoured field changes the output as it should (greedy, so the change is the field's alone), each ignored field
is accepted and changes nothing, each refused one is a 400 naming it (docs/api.md lists which is which)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

from shoal.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(120)
M = TINY_MODEL_NAME
CHAT = [{"role": "user", "content": "Name a river."}]
GREEDY: dict[str, Any] = {"temperature": 0, "extra_body": {"ignore_eos": True}}


def test_logit_bias_plus_100_forces_a_token(client: openai.OpenAI, tiny_tokenizer: Tokenizer) -> None:
    forced = tiny_tokenizer.encode(" river", add_special_tokens=False)[0]
    out = client.completions.create(model=M, prompt="Once", max_tokens=5, logit_bias={str(forced): 100}, **GREEDY)
    assert out.choices[0].text == tiny_tokenizer.decode([forced] * 5)
    chat = client.chat.completions.create(model=M, messages=CHAT, max_tokens=4, logit_bias={str(forced): 100}, **GREEDY)  # type: ignore[call-overload]
    assert chat.choices[0].message.content == tiny_tokenizer.decode([forced] * 4)


def test_logit_bias_minus_100_bans_tokens(client: openai.OpenAI, tiny_tokenizer: Tokenizer) -> None:
    """Every token but two banned: the greedy text is made of those two alone (it is not, unbanned)."""
    kept = {tiny_tokenizer.encode(word, add_special_tokens=False)[0] for word in (" the", " a")}
    pieces = "|".join(re.escape(tiny_tokenizer.decode([t])) for t in kept)
    banned = {str(t): -100 for t in range(tiny_tokenizer.vocab_size) if t not in kept}
    kwargs: dict[str, Any] = dict(model=M, prompt="The capital of France is", max_tokens=8, **GREEDY)
    assert not re.fullmatch(f"({pieces})*", client.completions.create(**kwargs).choices[0].text)
    assert re.fullmatch(f"({pieces})+", client.completions.create(logit_bias=banned, **kwargs).choices[0].text)


def test_logit_bias_past_the_vocabulary_is_named(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model=M, prompt="x", max_tokens=1, logit_bias={"99999": 5})
    assert error.value.body["param"] == "logit_bias" and "vocabulary" in error.value.body["message"]  # type: ignore[index]


def test_echo_opens_each_choice_with_its_prompt(client: openai.OpenAI, tiny_tokenizer: Tokenizer) -> None:
    kwargs: dict[str, Any] = dict(model=M, prompt="Once upon a time", max_tokens=6, **GREEDY)
    plain = client.completions.create(**kwargs)
    echoed = client.completions.create(echo=True, **kwargs)
    assert echoed.choices[0].text == "Once upon a time" + plain.choices[0].text
    assert echoed.usage == plain.usage
    chunks = list(client.completions.create(echo=True, stream=True, **kwargs))
    assert chunks[0].choices[0].text.startswith("Once upon a time")
    assert "".join(c.choices[0].text for c in chunks) == echoed.choices[0].text
    ids = tiny_tokenizer.encode("A river")
    by_ids = client.completions.create(model=M, prompt=ids, max_tokens=2, echo=True, n=2, seed=3)
    for choice in by_ids.choices:
        assert choice.text.startswith(tiny_tokenizer.decode(ids, skip_special_tokens=False))


def test_max_completion_tokens_is_max_tokens(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model=M, messages=CHAT, max_completion_tokens=3, **GREEDY)  # type: ignore[call-overload]
    assert out.usage.completion_tokens == 3 and out.choices[0].finish_reason == "length"
    same = client.chat.completions.create(model=M, messages=CHAT, max_completion_tokens=3, max_tokens=3, **GREEDY)  # type: ignore[call-overload]
    assert same.choices[0].message.content == out.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=M, messages=CHAT, max_completion_tokens=3, max_tokens=4)
    assert error.value.body["param"] == "max_completion_tokens"  # type: ignore[index]


IGNORED_CHAT: dict[str, Any] = {
    "store": True,
    "metadata": {"team": "search"},
    "service_tier": "auto",
    "prediction": {"type": "content", "content": "The Nile."},
    "modalities": ["text"],
    "reasoning_effort": "low",
    "verbosity": "low",
    "web_search_options": {},
    "prompt_cache_key": "k-1",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "implicit"},
    "safety_identifier": "hash-of-user",
    "moderation": {"model": "omni-moderation-latest"},
    "user": "user-42",
    "n": None,
    "stop": None,
}


def test_ignored_fields_are_accepted_and_change_nothing(client: openai.OpenAI) -> None:
    base = client.chat.completions.create(model=M, messages=CHAT, max_tokens=6, **GREEDY)  # type: ignore[call-overload]
    out = client.chat.completions.create(model=M, messages=CHAT, max_tokens=6, **GREEDY, **IGNORED_CHAT)  # type: ignore[call-overload]
    assert out.choices[0].message.content == base.choices[0].message.content
    stream = client.chat.completions.create(
        model=M, messages=CHAT, max_tokens=6, stream=True, stream_options={"include_obfuscation": True}, **GREEDY
    )  # type: ignore[call-overload]
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == base.choices[0].message.content
    text = client.completions.create(model=M, prompt="x", max_tokens=2, best_of=1, suffix=None, user="u")
    assert text.usage.completion_tokens <= 2


@pytest.mark.parametrize(
    ("endpoint", "extra", "param"),
    [
        ("chat/completions", {"echo": True}, "echo"),
        ("chat/completions", {"functions": [{"name": "f", "parameters": {}}]}, "functions"),
        ("chat/completions", {"function_call": "auto"}, "function_call"),
        ("chat/completions", {"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ("chat/completions", {"modalities": ["text", "audio"]}, "modalities"),
        ("chat/completions", {"logit_bias": {"3": 150}}, "logit_bias"),
        ("completions", {"echo": True, "logprobs": 1}, "echo"),
        ("completions", {"suffix": "the end"}, "suffix"),
        ("completions", {"best_of": 3}, "best_of"),
        ("completions", {"logit_bias": {"the": 1}}, "logit_bias"),
        ("completions", {"frobnicate": 1}, "frobnicate"),
    ],
)
def test_refused_fields_are_named(server: ServeProcess, endpoint: str, extra: dict[str, Any], param: str) -> None:
    body = {"model": M, "max_tokens": 2, **({"messages": CHAT} if endpoint.startswith("chat") else {"prompt": "x"})}
    r = httpx.post(f"{server.url}/v1/{endpoint}", json=body | extra, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_user_is_in_the_request_log_line(client: openai.OpenAI, server: ServeProcess) -> None:
    client.completions.create(model=M, prompt="x", max_tokens=1, user="user-7f3a")
    assert '"user": "user-7f3a"' in server.log(50_000)


@pytest.fixture(scope="module")
def lenient_server(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Any) -> Iterator[ServeProcess]:
    server = ServeProcess(tiny_model_dir, tmp_path_factory.mktemp("lenient") / "serve.log", "--ignore-unknown-fields")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_ignore_unknown_fields_accepts_and_logs_them(lenient_server: ServeProcess) -> None:
    body = {"model": M, "prompt": "x", "max_tokens": 1, "frobnicate": 1, "guided_whatever": "y"}
    r = httpx.post(f"{lenient_server.url}/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert "frobnicate" in lenient_server.log(50_000)
    response = {"model": M, "input": "x", "max_output_tokens": 1, "frobnicate": 1}
    assert httpx.post(f"{lenient_server.url}/v1/responses", json=response, timeout=30).status_code == 200
    chat = {"model": M, "messages": CHAT, "max_tokens": 1, "echo": True}
    assert httpx.post(f"{lenient_server.url}/v1/chat/completions", json=chat, timeout=30).json()["error"]["param"] == (
        "echo"
    )
