"""vLLM's ``/tokenize``, ``/detokenize`` and ``/version`` on a real ``shoal serve``: the ids are the ones
generation uses (``count`` is a generation's ``prompt_tokens``), they round-trip, and bad input is named."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

import shoal
from shoal.tokenizer import Tokenizer

pytestmark = pytest.mark.timeout(120)
M = TINY_MODEL_NAME
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a river."}]


def post(server: ServeProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=30)


def test_tokenize_a_prompt_as_completions_do(
    server: ServeProcess, client: openai.OpenAI, tiny_tokenizer: Tokenizer
) -> None:
    prompt = "The capital of France is"
    out = post(server, "/tokenize", {"model": M, "prompt": prompt}).json()
    assert out["tokens"] == tiny_tokenizer.encode(prompt) and out["count"] == len(out["tokens"])
    assert out["max_model_len"] == 256 and out["token_strs"] is None
    usage = client.completions.create(model=M, prompt=prompt, max_tokens=1).usage
    assert out["count"] == usage.prompt_tokens
    bare = post(server, "/tokenize", {"prompt": prompt, "add_special_tokens": False, "return_token_strs": True}).json()
    assert bare["tokens"] == tiny_tokenizer.encode(prompt, add_special_tokens=False)
    assert bare["token_strs"] == [tiny_tokenizer.backend.id_to_token(i) for i in bare["tokens"]]


def test_tokenize_a_conversation_as_chat_does(
    server: ServeProcess, client: openai.OpenAI, tiny_tokenizer: Tokenizer
) -> None:
    out = post(server, "/tokenize", {"model": M, "messages": CHAT}).json()
    usage = client.chat.completions.create(model=M, messages=CHAT, max_tokens=1).usage  # type: ignore[arg-type]
    assert out["count"] == usage.prompt_tokens
    no_prompt = post(server, "/tokenize", {"model": M, "messages": CHAT, "add_generation_prompt": False}).json()
    assert no_prompt["tokens"] == tiny_tokenizer.encode(
        tiny_tokenizer.apply_chat_template(CHAT, add_generation_prompt=False), add_special_tokens=False
    )
    assert no_prompt["count"] < out["count"]


def test_detokenize_round_trips(server: ServeProcess, tiny_tokenizer: Tokenizer) -> None:
    for body in ({"prompt": "A river runs through it."}, {"messages": CHAT}):
        tokens = post(server, "/tokenize", {"model": M, **body}).json()["tokens"]
        text = post(server, "/detokenize", {"model": M, "tokens": tokens}).json()["prompt"]
        assert text == tiny_tokenizer.decode(tokens, skip_special_tokens=False)
        assert post(server, "/tokenize", {"model": M, "prompt": text, "add_special_tokens": False}).json()[
            "tokens"
        ] == tiny_tokenizer.encode(text, add_special_tokens=False)
    plain = post(server, "/tokenize", {"prompt": "A river runs.", "add_special_tokens": False}).json()["tokens"]
    assert post(server, "/detokenize", {"tokens": plain}).json() == {"prompt": "A river runs."}


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/detokenize", {"model": M, "tokens": [1, 99999]}, 400, "tokens"),
        ("/detokenize", {"model": M, "tokens": [-1]}, 400, "tokens[0]"),
        ("/tokenize", {"model": "gpt-17", "prompt": "x"}, 404, "model"),
        ("/detokenize", {"model": "gpt-17", "tokens": [1]}, 404, "model"),
        ("/tokenize", {"model": M}, 400, "prompt"),
        ("/tokenize", {"model": M, "messages": []}, 400, "messages"),
        ("/tokenize", {"model": M, "prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
    ],
)
def test_bad_input_is_named(server: ServeProcess, path: str, body: dict[str, Any], status: int, param: str) -> None:
    r = post(server, path, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_version(server: ServeProcess) -> None:
    assert httpx.get(f"{server.url}/version", timeout=30).json() == {"version": shoal.__version__}
