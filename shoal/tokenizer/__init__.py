"""Tokenization shared by the engine and the gateway (torch-free)."""

from shoal.tokenizer.chat_template import ChatTemplateError
from shoal.tokenizer.detokenizer import Detokenizer, detokenizer_for
from shoal.tokenizer.gguf_vocab import UnsupportedTokenizerError
from shoal.tokenizer.prompt_tokens import (
    PromptTokenizer,
    chat_token_ids,
    completion_prompt_ids,
    completion_token_ids,
    responses_token_ids,
)
from shoal.tokenizer.tokenizer import Tokenizer, TokenizerFilesError

__all__ = [
    "ChatTemplateError",
    "Detokenizer",
    "PromptTokenizer",
    "Tokenizer",
    "TokenizerFilesError",
    "UnsupportedTokenizerError",
    "chat_token_ids",
    "completion_prompt_ids",
    "completion_token_ids",
    "detokenizer_for",
    "responses_token_ids",
]
