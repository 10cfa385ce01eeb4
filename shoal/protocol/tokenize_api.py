"""vLLM's ``/tokenize``, ``/detokenize`` and ``/version`` bodies, as pydantic models (torch-free: the gateway
validates with them too).

``/tokenize`` takes a completion prompt (``prompt``; special tokens added by default, as a completion's prompt
is) or a conversation (``messages``; rendered with the chat template and, by default, encoded without adding
special tokens, as a chat's prompt is; its ``tools`` rendered with it, as a chat's are), so its ids are the ones
generation would see. Shapes and defaults are vLLM's (``TokenizeCompletionRequest``, ``TokenizeChatRequest``, ``TokenizeResponse``, ``DetokenizeRequest``);
``model`` may be left out where one model is served.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from shoal.protocol.openai_api import MAX_TOKEN_ID, ChatMessage, _Request
from shoal.protocol.tools import ChatTool


class TokenizeCompletionRequest(_Request):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChatRequest(_Request):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = False
    return_token_strs: bool = False


TokenizeRequest = TokenizeCompletionRequest | TokenizeChatRequest


def tokenize_request_model(data: dict[str, Any]) -> type[TokenizeRequest]:
    """The form a ``/tokenize`` body takes: a conversation if it has ``messages``, else a prompt."""
    return TokenizeChatRequest if "messages" in data else TokenizeCompletionRequest


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]]


class DetokenizeResponse(BaseModel):
    prompt: str


class VersionResponse(BaseModel):
    version: str
