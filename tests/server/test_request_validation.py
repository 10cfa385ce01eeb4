"""Bad input gets a 4xx in OpenAI's error shape naming the problem, and the server keeps serving."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

from shoal.local import metric

pytestmark = pytest.mark.timeout(120)
M = TINY_MODEL_NAME
CHAT = [{"role": "user", "content": "hi"}]

CASES = [
    # (endpoint, raw body, status, expected param, words the message must contain)
    ("completions", b'{"model": "tiny-llama", "prompt": ', 400, None, "Malformed JSON"),
    ("completions", b'\xff\xfe{"model": 1}', 400, None, "UTF-8"),
    ("completions", b"[1, 2]", 400, None, "JSON object"),
    (
        "completions",
        b'{"model": "tiny-llama", "prompt": "x", "user": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        400,
        None,
        "nested too deeply",
    ),
    ("completions", {"model": M, "prompt": "x", "max_tokens": "many"}, 400, "max_tokens", "integer"),
    ("completions", {"model": M, "prompt": "x", "temperature": 3.5}, 400, "temperature", "less than or equal"),
    (
        "completions",
        {"model": M, "prompt": "x", "max_tokens": 4, "frobnicate": True},
        400,
        "frobnicate",
        "Unrecognized",
    ),
    ("completions", {"model": M, "prompt": ""}, 400, "prompt", "empty"),
    ("completions", {"model": M, "prompt": [1, 2, 999999]}, 400, "prompt", "vocabulary"),
    ("completions", {"model": M, "prompt": "x", "max_tokens": 10_000}, 400, "max_tokens", "context length"),
    ("completions", {"model": M, "prompt": "x", "n": 1_000_000}, 400, "n", "less than or equal"),
    ("completions", {"model": M, "prompt": "x", "stop": [""]}, 400, "stop", "empty"),
    ("completions", {"model": M, "prompt": "word " * 400}, 400, "prompt", "context length"),
    ("completions", {"model": "gpt-17", "prompt": "x"}, 404, "model", "does not exist"),
    ("chat/completions", {"model": M, "messages": []}, 400, "messages", "at least 1"),
    (
        "chat/completions",
        {"model": M, "messages": [{"role": "wizard", "content": "x"}]},
        400,
        "messages[0].role",
        "Input should be 'system'",
    ),
    ("chat/completions", {"model": M, "messages": [{"role": "tool", "content": "x"}]}, 400, "messages", "tool"),
    ("chat/completions", {"model": M, "messages": CHAT, "top_logprobs": 2}, 400, "top_logprobs", "logprobs"),
    (
        "chat/completions",
        {"model": M, "messages": CHAT, "stream_options": {"include_usage": True}},
        400,
        "stream_options",
        "stream",
    ),
    ("chat/completions", {"messages": CHAT}, 400, "model", "required"),
]


@pytest.mark.parametrize(("endpoint", "body", "status", "param", "words"), CASES)
def test_bad_request_is_named(
    server: ServeProcess, endpoint: str, body: object, status: int, param: str | None, words: str
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{server.url}/v1/{endpoint}", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert words.lower() in error["message"].lower()
    assert "Traceback" not in r.text


def test_oversized_body_is_refused_before_parsing(server: ServeProcess) -> None:
    huge = json.dumps({"model": M, "prompt": "x" * (10 * 1024 * 1024)}).encode()
    r = httpx.post(f"{server.url}/v1/completions", content=huge, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert "limit" in r.json()["error"]["message"]


def test_unknown_route_and_method_use_the_error_shape(server: ServeProcess) -> None:
    assert httpx.get(f"{server.url}/v1/nothing").json()["error"]["type"] == "not_found_error"
    r = httpx.get(f"{server.url}/v1/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_bad_requests_leave_nothing_behind_and_others_are_served(server: ServeProcess) -> None:
    for _, body, *_ in CASES:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        httpx.post(f"{server.url}/v1/completions", content=content, headers={"Content-Type": "application/json"})
    ok = httpx.post(f"{server.url}/v1/completions", json={"model": M, "prompt": "fine", "max_tokens": 3}, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1
    assert metric(server.url, "shoal_engine_requests_running") == 0
    assert metric(server.url, "shoal_engine_kv_cache_usage_ratio") == 0
