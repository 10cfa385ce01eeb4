"""Tokenization shared by the engine and the gateway (torch-free)."""

from shoal.tokenizer.chat_template import ChatTemplateError
from shoal.tokenizer.detokenizer import IncrementalDetokenizer
from shoal.tokenizer.gguf_vocab import UnsupportedTokenizerError
from shoal.tokenizer.tokenizer import Tokenizer, TokenizerFilesError

__all__ = [
    "ChatTemplateError",
    "IncrementalDetokenizer",
    "Tokenizer",
    "TokenizerFilesError",
    "UnsupportedTokenizerError",
]
