"""Grammars compiled against the model's vocabulary, cached, and one matcher per constrained request.

Design. The grammar library is llguidance (not xgrammar): it is a Rust wheel with no Python dependencies (xgrammar
pins torch, transformers and a TVM runtime, which would fight the engine's own torch build), it compiles a schema
in about a millisecond because it computes each token mask lazily from an Earley parser instead of precomputing
per-state masks (so a new schema never stalls a request for seconds), it bounds the work of every mask
(``LLParserLimits``: lexer fuel and Earley items per step) so one pathological grammar cannot stall the batch, and
it reads JSON Schema, regular expressions, Lark and GBNF grammars natively. It is also vLLM's ``guidance`` backend.

Compiling is building a pristine ``LLMatcher`` for a ``GrammarSpec`` (the library parses the grammar and builds its
lexer, with the GIL released). The server compiles at admission, in a worker thread, so a grammar that does not
compile is a 400 naming its field and a slow one never holds up the step loop; the step thread then only takes
a ``deep_copy`` of the cached matcher (microseconds) for each request. The cache is a bounded LRU keyed by the
spec (one compiler per engine, hence per tokenizer). A matcher advances once per token the request appends
(``EngineCore``), never on recompute after preemption (the tokens are already in it), and is dropped when its
request finishes or is aborted.

JSON is compact (``", "`` and ``": "`` separators, no other whitespace): free whitespace lets a weak model pad
forever without ever closing the object.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import llguidance

from shoal.engine.core.errors import InvalidRequestError
from shoal.protocol.structured_output import GrammarSpec
from shoal.tokenizer import Tokenizer

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a TypedDict of the stubs only

CACHE_SIZE = 256
_JSON_OPTIONS: JsonCompileOptions = {
    "item_separator": ", ",
    "key_separator": ": ",
    "whitespace_flexible": False,
}


class GrammarCompiler:
    """Compiles specs for one tokenizer; safe to call from the server's worker threads and the step thread."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size  # the logits' width, which the masks cover
        self._eos = sorted(eos_token_ids)
        self._ll_tokenizer: llguidance.LLTokenizer | None = None
        self._compiled: OrderedDict[GrammarSpec, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()  # the cache's
        self._vocabulary_lock = threading.Lock()  # held while the vocabulary is built (0.3 s), never by a cache hit

    def compile(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        """The pristine matcher of ``spec`` (from the cache when there); ``InvalidRequestError`` if it does not compile."""
        with self._lock:
            cached = self._compiled.get(spec)
            if cached is not None:
                self._compiled.move_to_end(spec)
                return cached
        if self._tokenizer.vocab_size > self._vocab_size:
            raise InvalidRequestError(
                spec.field,
                f"structured output is not available for this model: its tokenizer has {self._tokenizer.vocab_size} "
                f"tokens but the model only {self._vocab_size} logits",
            )
        matcher = llguidance.LLMatcher(self._vocabulary(), _grammar(spec), log_level=0)
        if matcher.is_error():
            raise InvalidRequestError(spec.field, f"the grammar library could not compile it: {matcher.get_error()}")
        with self._lock:
            self._compiled[spec] = matcher
            self._compiled.move_to_end(spec)
            while len(self._compiled) > CACHE_SIZE:
                self._compiled.popitem(last=False)
        return matcher

    def matcher(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        """A fresh matcher for one request: a copy of the compiled one, which stays pristine in the cache."""
        return self.compile(spec).deep_copy()

    def _vocabulary(self) -> llguidance.LLTokenizer:
        """The tokenizer as the library sees it, built once (the model's vocabulary width, its EOS ids)."""
        with self._vocabulary_lock:
            if self._ll_tokenizer is None:
                self._ll_tokenizer = llguidance.LLTokenizer(
                    self._tokenizer.backend.to_str(), n_vocab=self._vocab_size, eos_token=self._eos or None
                )
            return self._ll_tokenizer


def _grammar(spec: GrammarSpec) -> str:
    """The library's grammar text for a spec; a grammar it cannot even read is the request's error."""
    try:
        if spec.kind == "json_schema":
            strictness: JsonCompileOptions = {"lenient": not spec.strict}
            return llguidance.LLMatcher.grammar_from_json_schema(spec.source, _JSON_OPTIONS, strictness)
        if spec.kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(spec.source)
        return llguidance.grammar_from(spec.kind, spec.source)
    except ValueError as exc:
        raise InvalidRequestError(spec.field, f"the grammar library could not compile it: {exc}") from None
