"""The engine and the gateway turn a request into the same token ids: both are ``shoal.tokenizer``'s output.

Routing by prefix is only right while they agree, so each kind of prompt (text, token ids, a batch of either, a
chat with content parts and names) goes through the engine's endpoint preparation and the gateway's prompt
reader, and both must equal the shared function's answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.engine.server import chat, completions
from shoal.gateway.prompts import PromptReader
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest
from shoal.tokenizer import Tokenizer, chat_token_ids, completion_token_ids

MODEL = "tiny"
MAX_MODEL_LEN = 256
SYSTEM = {"role": "system", "content": "You are terse."}

COMPLETIONS: dict[str, Any] = {
    "text": "The quick brown fox",
    "token ids": [5, 17, 99, 3],
    "text batch": ["first prompt", "a second, longer prompt"],
    "token-id batch": [[1, 2, 3], [40, 41]],
}
CHATS: dict[str, list[dict[str, Any]]] = {
    "text": [SYSTEM, {"role": "user", "content": "Hello there"}],
    "content parts and a name": [
        SYSTEM,
        {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Again"},
    ],
}


def _engine_ids(request: CompletionRequest | ChatCompletionRequest, tokenizer: Tokenizer) -> list[list[int]]:
    """The prompt ids of each engine request the engine's endpoint would submit (one per prompt, ``n`` = 1)."""
    endpoint = chat if isinstance(request, ChatCompletionRequest) else completions
    prepared = asyncio.run(endpoint.prepare(request, "contract", tokenizer, MAX_MODEL_LEN))  # type: ignore[attr-defined]
    return [child.prompt_token_ids for child in prepared.children]


def _gateway_ids(request: CompletionRequest | ChatCompletionRequest, tokenizer: Tokenizer) -> list[int] | None:
    reader = PromptReader()
    reader.add(MODEL, tokenizer)
    return reader.read(request).token_ids


@pytest.mark.parametrize("prompt", COMPLETIONS.values(), ids=COMPLETIONS.keys())
def test_completion_prompts_are_the_shared_functions_ids_on_both_sides(tiny_tokenizer: Tokenizer, prompt: Any) -> None:
    request = CompletionRequest.model_validate({"model": MODEL, "prompt": prompt, "max_tokens": 4})
    expected = completion_token_ids(tiny_tokenizer, request)
    assert all(expected)
    assert _engine_ids(request, tiny_tokenizer) == expected
    assert _gateway_ids(request, tiny_tokenizer) == expected[0]  # a batch is routed by its first prompt


@pytest.mark.parametrize("messages", CHATS.values(), ids=CHATS.keys())
def test_chats_are_the_shared_functions_ids_on_both_sides(
    tiny_tokenizer: Tokenizer, messages: list[dict[str, Any]]
) -> None:
    request = ChatCompletionRequest.model_validate({"model": MODEL, "messages": messages, "max_tokens": 4})
    expected = chat_token_ids(tiny_tokenizer, request)
    rendered = tiny_tokenizer.apply_chat_template([m.for_template() for m in request.messages])
    assert expected == tiny_tokenizer.encode(rendered, add_special_tokens=False)
    assert _engine_ids(request, tiny_tokenizer) == [expected]
    assert _gateway_ids(request, tiny_tokenizer) == expected


@settings(max_examples=25, deadline=None)
@given(text=st.text(min_size=1, max_size=40), as_chat=st.booleans())
def test_any_text_tokenizes_the_same_for_the_engine_and_the_gateway(
    tiny_tokenizer: Tokenizer, text: str, as_chat: bool
) -> None:
    request: CompletionRequest | ChatCompletionRequest
    if as_chat:
        request = ChatCompletionRequest.model_validate(
            {"model": MODEL, "messages": [{"role": "user", "content": text}]}
        )
    else:
        request = CompletionRequest.model_validate({"model": MODEL, "prompt": text, "max_tokens": 1})
    assert _engine_ids(request, tiny_tokenizer) == [_gateway_ids(request, tiny_tokenizer)]
