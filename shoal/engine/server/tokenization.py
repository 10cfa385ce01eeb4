"""``/tokenize`` and ``/detokenize``: the served model's tokenizer over HTTP, shaped as vLLM's.

A prompt is encoded exactly as ``/v1/completions`` encodes it and a conversation as ``/v1/chat/completions``
renders and encodes it (with vLLM's switches ``add_special_tokens`` and ``add_generation_prompt``), so
``count`` is the ``prompt_tokens`` a generation from the same input reports. Tokenizing runs off the event loop.
"""

from __future__ import annotations

import asyncio

from shoal.protocol.errors import invalid_request
from shoal.protocol.tokenize_api import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizeRequest,
    TokenizeResponse,
)
from shoal.protocol.tools import template_variables
from shoal.tokenizer import ChatTemplateError, Tokenizer


async def tokenize(req: TokenizeRequest, tokenizer: Tokenizer, max_model_len: int) -> TokenizeResponse:
    """The request's token ids (and, if asked, each token's string as the vocabulary spells it)."""
    try:
        ids = await asyncio.to_thread(_token_ids, req, tokenizer)
    except ChatTemplateError as exc:
        raise invalid_request(f"messages: {exc}", param="messages") from None
    strs = [tokenizer.backend.id_to_token(i) or "" for i in ids] if req.return_token_strs else None
    return TokenizeResponse(count=len(ids), max_model_len=max_model_len, tokens=ids, token_strs=strs)


def _token_ids(req: TokenizeRequest, tokenizer: Tokenizer) -> list[int]:
    if isinstance(req, TokenizeChatRequest):
        messages = [m.for_template() for m in req.messages]
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=req.add_generation_prompt, **template_variables(req.tools)
        )
        return tokenizer.encode(text, add_special_tokens=req.add_special_tokens)
    return tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)


async def detokenize(req: DetokenizeRequest, tokenizer: Tokenizer) -> DetokenizeResponse:
    """The text of ``tokens`` (special tokens kept, as vLLM's), or a 400 naming the first id past the vocabulary."""
    vocab = tokenizer.vocab_size
    bad = next((t for t in req.tokens if t >= vocab), None)
    if bad is not None:
        raise invalid_request(f"tokens: token id {bad} is outside the vocabulary [0, {vocab})", param="tokens")
    text = await asyncio.to_thread(tokenizer.decode, req.tokens, False)
    return DetokenizeResponse(prompt=text)
