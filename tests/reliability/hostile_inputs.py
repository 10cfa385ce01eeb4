"""Hand-made hostile requests, each a client mistake that must get a 4xx, never a 5xx, a crash or a hang."""

from __future__ import annotations

import json

M = "tiny"
CHAT = [{"role": "user", "content": "hi"}]


def _json(body: object) -> bytes:
    return json.dumps(body).encode()


# (name, endpoint, raw body)
HOSTILE: list[tuple[str, str, bytes]] = [
    ("utf-16 body", "completions", json.dumps({"model": M, "prompt": "x"}).encode("utf-16")),
    ("latin-1 bytes", "completions", b'{"model": "tiny", "prompt": "caf\xe9"}'),
    ("bom", "completions", b"\xef\xbb\xbf" + _json({"model": M, "prompt": "x"})),
    ("lone surrogate", "completions", b'{"model": "tiny", "prompt": "\\ud800 x", "max_tokens": 2}'),
    (
        "lone surrogate in chat",
        "chat/completions",
        b'{"model": "tiny", "messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}',
    ),
    ("nul and escapes", "completions", _json({"model": M, "prompt": "\x00\x1b[2J\x7f\u202e", "max_tokens": 2})),
    (
        "deep object",
        "chat/completions",
        b'{"model": "tiny", "messages": ' + b'{"a":' * 30_000 + b"1" + b"}" * 30_000 + b"}",
    ),
    ("wide array", "completions", _json({"model": M, "prompt": [[1]] * 50_000, "max_tokens": 1})),
    ("prompt is an object", "completions", _json({"model": M, "prompt": {"text": "x"}})),
    ("model is a number", "completions", _json({"model": 5, "prompt": "x"})),
    ("messages is a string", "chat/completions", _json({"model": M, "messages": "hi"})),
    ("n is a string", "completions", _json({"model": M, "prompt": "x", "n": "1"})),
    ("temperature is a bool", "completions", _json({"model": M, "prompt": "x", "temperature": True})),
    ("huge n", "completions", _json({"model": M, "prompt": "x", "n": 10**9})),
    ("huge max_tokens", "completions", _json({"model": M, "prompt": "x", "max_tokens": 10**12})),
    ("max_tokens past int64", "completions", _json({"model": M, "prompt": "x", "max_tokens": 10**30})),
    ("huge logprobs", "completions", _json({"model": M, "prompt": "x", "logprobs": 10**6})),
    (
        "huge top_logprobs",
        "chat/completions",
        _json({"model": M, "messages": CHAT, "logprobs": True, "top_logprobs": 10**6}),
    ),
    ("thousands of stop strings", "completions", _json({"model": M, "prompt": "x", "stop": ["a"] * 5000})),
    ("huge stop string", "completions", _json({"model": M, "prompt": "x", "stop": "s" * 100_000})),
    ("huge seed", "completions", _json({"model": M, "prompt": "x", "seed": 2**80})),
    ("nan temperature", "completions", b'{"model": "tiny", "prompt": "x", "temperature": NaN}'),
    ("infinite top_p", "completions", b'{"model": "tiny", "prompt": "x", "top_p": Infinity}'),
    ("negative token id", "completions", _json({"model": M, "prompt": [-1, 5]})),
    ("token id past int64", "completions", _json({"model": M, "prompt": [2**70]})),
    # found by schemathesis: a full block of ids past 32 bits was a 500 in the gateway (its block hash)
    ("token ids past 32 bits", "completions", _json({"model": M, "prompt": [2**33] * 20})),
    ("huge stop_token_ids", "completions", _json({"model": M, "prompt": "x", "stop_token_ids": [2**70]})),
    (
        "stop_token_ids outside the vocabulary",
        "chat/completions",
        _json({"model": M, "messages": CHAT, "stop_token_ids": [542, 10**6], "min_tokens": 2, "max_tokens": 4}),
    ),
    (
        "thousands of messages",
        "chat/completions",
        _json({"model": M, "messages": [{"role": "user", "content": "hi"}] * 20_000}),
    ),
    (
        "message without content",
        "chat/completions",
        _json({"model": M, "messages": [{"role": "user"}], "max_tokens": 2}),
    ),
    ("input items that are not objects", "responses", _json({"model": M, "input": [5, "x", None]})),
    ("item type that is not a string", "responses", _json({"model": M, "input": [{"type": ["message"]}]})),
    (
        "content part type that is a list",
        "responses",
        _json({"model": M, "input": [{"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}]}),
    ),
    ("lone surrogate in responses", "responses", b'{"model": "tiny", "input": "\\udfff", "max_output_tokens": 2}'),
    (
        "thousands of input items",
        "responses",
        _json({"model": M, "input": [{"role": "user", "content": "hi"}] * 20_000}),
    ),
    ("huge max_output_tokens", "responses", _json({"model": M, "input": "x", "max_output_tokens": 10**30})),
    ("text.format that is a string", "responses", _json({"model": M, "input": "x", "text": {"format": "json"}})),
    (
        "deep text.format schema",
        "responses",
        b'{"model": "tiny", "input": "x", "text": {"format": {"type": "json_schema", "name": "d", "schema": '
        + b'{"a":' * 30_000
        + b"1"
        + b"}" * 30_000
        + b"}}}",
    ),
    ("empty body", "completions", b""),
    ("null body", "completions", b"null"),
    ("duplicate keys", "completions", b'{"model": "tiny", "model": 7, "prompt": "x"}'),
    ("huge number literal", "completions", b'{"model": "tiny", "prompt": "x", "max_tokens": 1' + b"0" * 5000 + b"}"),
]
