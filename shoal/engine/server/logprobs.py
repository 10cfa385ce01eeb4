"""The engine's per-token log-probabilities in OpenAI's two formats (legacy completions and chat)."""

from __future__ import annotations

from shoal.engine.core.outputs import SampleLogprobs
from shoal.protocol.openai_api import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob
from shoal.tokenizer import Tokenizer


def _token_text(tokenizer: Tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def completion_logprobs(tokenizer: Tokenizer, samples: list[SampleLogprobs], text_offset: int) -> CompletionLogprobs:
    """Parallel lists; ``text_offset`` is where the first of these tokens starts in the choice's text."""
    result = CompletionLogprobs()
    offset = text_offset
    for sample in samples:
        token = _token_text(tokenizer, sample.token_id)
        result.tokens.append(token)
        result.token_logprobs.append(sample.logprob)
        result.top_logprobs.append({_token_text(tokenizer, t.token_id): t.logprob for t in sample.top} or None)
        result.text_offset.append(offset)
        offset += len(token)
    return result


def chat_logprobs(tokenizer: Tokenizer, samples: list[SampleLogprobs]) -> ChatLogprobs:
    content = []
    for sample in samples:
        token = _token_text(tokenizer, sample.token_id)
        top = [
            TopLogprob(token=(text := _token_text(tokenizer, t.token_id)), logprob=t.logprob, bytes=list(text.encode()))
            for t in sample.top
        ]
        content.append(
            ChatTokenLogprob(token=token, logprob=sample.logprob, bytes=list(token.encode()), top_logprobs=top)
        )
    return ChatLogprobs(content=content)
