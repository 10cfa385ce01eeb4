"""A request's prompt as token ids: the engine's and the gateway's half of the prompt contract, written once.

The gateway hashes the blocks of these ids (``shoal.protocol.block_hash``) to find the replica that holds them,
so routing is only right while it tokenizes exactly as the engine does; both call these functions. A completion
prompt is ``encode(prompt)`` (special tokens added per the tokenizer's config) and a token-id prompt is taken as
it is; a chat is the chat template rendered over ``ChatMessage.for_template()`` of each message (and the request's
``tools``, as transformers' ``apply_chat_template(tools=...)`` passes them) and then
``encode(text, add_special_tokens=False)``, since the template already places the special tokens it wants; a
Responses request is the chat its instructions and input stand for (``ResponsesRequest.template_messages``), with
its tools as chat's (``ResponsesRequest.tool_fields``).
"""

from __future__ import annotations

from typing import Any, Protocol

from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest
from shoal.protocol.responses_api import ResponsesRequest
from shoal.protocol.tools import template_variables


class PromptTokenizer(Protocol):
    """What these functions need of a tokenizer (``shoal.tokenizer.Tokenizer``, or a test's own)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **variables: Any
    ) -> str: ...


def completion_prompt_ids(tokenizer: PromptTokenizer, prompt: str | list[int]) -> list[int]:
    """One completion prompt's ids: text is encoded, token ids are taken as they are."""
    return list(prompt) if isinstance(prompt, list) else tokenizer.encode(prompt)


def completion_token_ids(tokenizer: PromptTokenizer, request: CompletionRequest) -> list[list[int]]:
    """Every prompt of the batch, in order."""
    return [completion_prompt_ids(tokenizer, p) for p in request.prompts()]


def template_token_ids(
    tokenizer: PromptTokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **variables: Any
) -> list[int]:
    """Messages rendered with the chat template (``variables``: its ``tools``) and encoded; raises
    ``ChatTemplateError`` if they cannot be."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **variables)
    return tokenizer.encode(text, add_special_tokens=False)


def chat_token_ids(tokenizer: PromptTokenizer, request: ChatCompletionRequest) -> list[int]:
    """The conversation rendered with the chat template; raises ``ChatTemplateError`` if it cannot be."""
    messages = [m.for_template() for m in request.messages]
    return template_token_ids(tokenizer, messages, request.add_generation_prompt, **template_variables(request.tools))


def responses_token_ids(
    tokenizer: PromptTokenizer, request: ResponsesRequest, history: list[dict[str, Any]] | None = None
) -> list[int]:
    """A Responses request's instructions, the conversation it continues (``history``) and its input, rendered as
    the chat they stand for, with its tools."""
    tools = template_variables(request.tool_fields().tools)
    return template_token_ids(tokenizer, request.template_messages(history), **tools)
