"""A request's prompt as the engine will see it: token ids, block hashes and the token cost charged to it.

The gateway must tokenize exactly as the engine does, or its block hashes name nothing the engine holds, so both
call the same functions (``shoal.tokenizer.prompt_tokens``). A batch of prompts is routed by its first and charged
for all. Tokenizers load lazily per model (``shoal.tokenizer``, torch-free); a model whose tokenizer cannot be found
(or is still loading) is still served, routed without prefix information and charged an estimate.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial

from shoal.protocol.block_hash import DEFAULT_BLOCK_SIZE, adapter_extra_key, hash_blocks
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest
from shoal.protocol.responses_api import ResponsesRequest
from shoal.tokenizer.prompt_tokens import PromptTokenizer, chat_token_ids, completion_prompt_ids, responses_token_ids

log = logging.getLogger(__name__)

DEFAULT_CHAT_MAX_TOKENS = 256
DEFAULT_COMPLETION_MAX_TOKENS = 16
BYTES_PER_TOKEN_ESTIMATE = 4


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int] | None
    cost_tokens: int  # prompt plus output budget: what quotas charge
    output_tokens: int = 0  # the output budget part of it: what routing charges a replica until the request ends
    extra_key: bytes = b""  # the engine's block-hash extra key for it (a LoRA adapter's)

    def block_hashes(self, block_size: int = DEFAULT_BLOCK_SIZE) -> list[int]:
        return hash_blocks(self.token_ids, block_size, self.extra_key) if self.token_ids else []


def _load_tokenizer(source: str) -> PromptTokenizer:
    from shoal.model_registry import resolve_model
    from shoal.tokenizer import Tokenizer

    return Tokenizer.from_source(resolve_model(source))


class PromptReader:
    """Turns validated requests into ``Prompt``s with each model's tokenizer (``sources``: model -> name or path).

    Loading a tokenizer can take seconds (a GGUF's vocabulary), so it happens on a worker thread, started by
    ``preload`` or by the first request for the model; until it is ready, requests for that model are routed
    without prefix information instead of waiting.
    """

    def __init__(self, sources: Mapping[str, str] | None = None) -> None:
        self._sources = dict(sources or {})
        self._tokenizers: dict[str, PromptTokenizer | None] = {}
        self._loading: dict[str, Future[PromptTokenizer | None]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer-load")

    def add(self, model: str, tokenizer: PromptTokenizer) -> None:
        self._tokenizers[model] = tokenizer

    def load(self, model: str) -> PromptTokenizer | None:
        """Loads (blocking) and keeps the model's tokenizer; ``None`` if it cannot be found."""
        source = self._sources.get(model, model)
        try:
            tokenizer: PromptTokenizer | None = _load_tokenizer(source)
        except Exception as exc:  # noqa: BLE001 - any failure means "route without prefix information"
            log.warning("no tokenizer for model %r (source %r): %s; routing without prefixes", model, source, exc)
            tokenizer = None
        self._tokenizers[model] = tokenizer
        gc.freeze()  # a tokenizer's tables live forever: keep full collections from walking them (tail latency)
        return tokenizer

    def preload(self, models: Iterable[str] | None = None) -> None:
        for model in self._sources if models is None else models:
            if model not in self._tokenizers and model not in self._loading:
                self._loading[model] = self._pool.submit(self.load, model)

    def loading(self) -> list[str]:
        """Models whose tokenizer is being loaded right now."""
        return sorted(model for model, future in self._loading.items() if not future.done())

    def tokenizer(self, model: str) -> PromptTokenizer | None:
        """The model's tokenizer if loaded; otherwise starts loading it and answers ``None`` for now."""
        if model in self._tokenizers:
            return self._tokenizers[model]
        self.preload([model])
        return None

    def read(
        self, request: CompletionRequest | ChatCompletionRequest | ResponsesRequest, parent: str | None = None
    ) -> Prompt:
        """The (first) prompt of a validated request; never raises on content the engine will reject. ``parent``:
        the base model when ``request.model`` is a LoRA adapter of it, whose tokenizer the adapter shares and whose
        engine hashes the adapter's blocks with the adapter's extra key."""
        prompt = self._read(request, self.tokenizer(parent or request.model))
        return prompt if parent is None else replace(prompt, extra_key=adapter_extra_key(request.model))

    @staticmethod
    def _read(
        request: CompletionRequest | ChatCompletionRequest | ResponsesRequest, tokenizer: PromptTokenizer | None
    ) -> Prompt:
        if isinstance(request, ChatCompletionRequest):
            texts = [m.text() for m in request.messages]
            texts += [t.model_dump_json(exclude_none=True) for t in request.tools or []]  # rendered too
            limit = request.output_limit()
            return _conversation(tokenizer, request.model, partial(chat_token_ids, request=request), texts, limit)
        if isinstance(request, ResponsesRequest):
            texts = [str(m) for m in request.template_messages()]  # calls and their results are rendered too
            texts += [t.model_dump_json(exclude_none=True) for t in request.tools or []]
            rendered = partial(responses_token_ids, request=request)
            return _conversation(tokenizer, request.model, rendered, texts, request.max_output_tokens)
        max_tokens = request.max_tokens or DEFAULT_COMPLETION_MAX_TOKENS
        prompts = request.prompts()
        prompt = prompts[0]
        if tokenizer is not None:
            ids = completion_prompt_ids(tokenizer, prompt)
        elif isinstance(prompt, list):
            ids = prompt  # what completion_prompt_ids answers for token ids, with or without a tokenizer
        else:
            estimate = len(prompt.encode()) * len(prompts) // BYTES_PER_TOKEN_ESTIMATE
            return Prompt(None, estimate + max_tokens, max_tokens)
        return Prompt(ids, len(ids) * len(prompts) + max_tokens, max_tokens)


def _conversation(
    tokenizer: PromptTokenizer | None,
    model: str,
    token_ids: Callable[[PromptTokenizer], list[int]],
    texts: list[str],
    output_limit: int | None,
) -> Prompt:
    """A chat's or a Responses request's prompt: ``token_ids`` renders and encodes it as the engine does; without
    a tokenizer (or when the template refuses it) its cost is estimated from its ``texts``."""
    max_tokens = output_limit or DEFAULT_CHAT_MAX_TOKENS
    if tokenizer is not None:
        try:
            ids = token_ids(tokenizer)
            return Prompt(ids, len(ids) + max_tokens, max_tokens)
        except Exception:  # the engine answers a bad conversation with a 400; routing needn't
            log.debug("chat template failed for %r; routing without prefixes", model, exc_info=True)
    size = sum(len(text.encode()) for text in texts)
    return Prompt(None, size // BYTES_PER_TOKEN_ESTIMATE + max_tokens, max_tokens)
