"""The OpenAI wire format for completions, chat completions and models, as pydantic models.

Requests accept every field of OpenAI's current chat and completions schemas (honoured, or accepted and ignored
for the reason ``docs/api.md`` gives, or refused with a 400 where ignoring would promise what is not done) and
forbid the rest, so a typo (``max_token``) is a 400 naming it rather than a silently ignored option (unless the
server runs with ``--ignore-unknown-fields``: ``shoal.protocol.json_body``). A ``null`` for a field that has no
``null`` of its own stands for the field's default, as OpenAI reads it. Besides OpenAI's own parameters they
accept vLLM's sampling extras (``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``, ``min_tokens``,
``stop_token_ids``, ``skip_special_tokens``) that the official SDK sends through ``extra_body``. Bounds that
only depend on the request live here; bounds that depend on the model (context length, the vocabulary) are
checked by the engine. Responses and streaming chunks follow the shapes the official SDKs parse. Nothing here
imports torch: the gateway parses the same models.

Structured output (``response_format``, vLLM's ``guided_*`` extras and its newer ``structured_outputs``) is
validated here for its shape only; whether a schema or grammar compiles is the engine's call (a 400 naming the
field, with the grammar library's message).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shoal.protocol.tools import DeltaToolCall, ToolCall, ToolFields

MAX_N = 128
MAX_LOGPROBS = 20
MAX_STOP_SEQUENCES = 16
MAX_TOKEN_ID = 2**31 - 1  # past any vocabulary; the gateway hashes ids as 32-bit, the engine indexes int32/int64
MAX_LOGIT_BIAS = 1024  # entries of logit_bias (OpenAI documents no bound; each entry costs a write per step)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        """OpenAI's optional fields may be sent as ``null`` (some SDKs and frameworks do): a field that has no
        ``null`` of its own (``n``, ``stream``, ``echo``) then takes its default."""
        if not isinstance(data, dict) or None not in data.values():
            return data
        fields = cls.model_fields
        return {
            k: v
            for k, v in data.items()
            if v is not None
            or k not in fields
            or fields[k].is_required()
            or type(None) in get_args(fields[k].annotation)
        }


class StreamOptions(_Request):
    include_usage: bool = False
    include_obfuscation: bool = False  # ignored: no obfuscation padding is added to stream chunks


# ---- structured output: OpenAI's response_format and vLLM's guided decoding extras ------------------------


SchemaName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]


class JsonSchemaFormat(_Request):
    """``response_format.json_schema``: the schema every output validates against (``strict`` as OpenAI's)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: SchemaName
    description: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(_Request):
    """``{"type": "text"}`` (no constraint), ``{"type": "json_object"}`` or ``{"type": "json_schema", ...}``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError('json_schema is required with type "json_schema" and only with it')
        return self


def _json_object_text(value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """A schema sent as a string must be a JSON object (vLLM takes both forms)."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueError("must be a JSON schema object")
    return value


NonEmptyStr = Annotated[str, Field(min_length=1)]


class StructuredOutputs(_Request):
    """vLLM's ``structured_outputs`` (its current name for the ``guided_*`` fields): exactly one constraint."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    json_schema: str | dict[str, Any] | None = Field(None, alias="json")
    regex: NonEmptyStr | None = None
    choice: Annotated[list[NonEmptyStr], Field(min_length=1)] | None = None
    grammar: NonEmptyStr | None = None
    json_object: bool | None = None

    _schema_is_json = field_validator("json_schema")(_json_object_text)

    @model_validator(mode="after")
    def _exactly_one(self) -> StructuredOutputs:
        named = [name for name, value in self.constraints().items() if value is not None and value is not False]
        if len(named) != 1:
            raise ValueError(f"give exactly one of json, regex, choice, grammar, json_object; got {named}")
        return self

    def constraints(self) -> dict[str, Any]:
        return {
            "json": self.json_schema,
            "regex": self.regex,
            "choice": self.choice,
            "grammar": self.grammar,
            "json_object": self.json_object,
        }


class StructuredOutputFields(_Request):
    """The fields that constrain the output to a schema, regex, choice or grammar: at most one per request."""

    response_format: ResponseFormat | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: NonEmptyStr | None = None
    guided_choice: Annotated[list[NonEmptyStr], Field(min_length=1)] | None = None
    guided_grammar: NonEmptyStr | None = None
    structured_outputs: StructuredOutputs | None = None

    _guided_json_is_json = field_validator("guided_json")(_json_object_text)

    @model_validator(mode="after")
    def _one_output_constraint(self) -> StructuredOutputFields:
        named = self.output_constraints()
        if len(named) > 1:
            raise ValueError(f"{named[1]}: only one field may constrain the output, got {', '.join(named)}")
        return self

    def output_constraints(self) -> list[str]:
        """The names of the fields that constrain this request's output (``response_format`` text does not)."""
        fields = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")
        named = [name for name in fields if getattr(self, name) is not None]
        if self.response_format is not None and self.response_format.type != "text":
            named.insert(0, "response_format")
        return named


class _SamplingFields(StructuredOutputFields):
    """The parameters both endpoints share."""

    model: str = Field(min_length=1)
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    user: str | None = None
    logit_bias: Annotated[dict[str, float], Field(max_length=MAX_LOGIT_BIAS)] | None = None
    # vLLM's extras
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    stop_token_ids: list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]] | None = None
    skip_special_tokens: bool = True

    @field_validator("stop")
    @classmethod
    def _stop_strings_not_empty(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else (stop or [])
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must not be empty")
        return stop

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias_is_token_ids_to_bias(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for key, value in (bias or {}).items():
            if not key.isdigit() or int(key) > MAX_TOKEN_ID:
                raise ValueError(f"keys must be token ids (non-negative integers as strings), got {key!r}")
            if not -100.0 <= value <= 100.0:
                raise ValueError(f"biases must be in [-100, 100], got {value} for token {key}")
        return bias

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only allowed when stream is true")
        return self

    def token_bias(self) -> dict[int, float]:
        """``logit_bias`` keyed by token id, as the sampler adds it."""
        return {int(token): bias for token, bias in (self.logit_bias or {}).items()}


TokenIds = Annotated[list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]], Field(min_length=1)]


# ---- the rest of OpenAI's request schemas: each field honoured, ignored or refused as docs/api.md says ---------


class _CompletionSchemaFields(_Request):
    """Completions fields beyond the sampling ones. ``echo`` is honoured (without prompt logprobs);
    ``best_of`` only where it changes nothing (equal to ``n``); ``suffix`` (insertion) is refused."""

    echo: bool = False
    best_of: int | None = Field(None, ge=1, le=MAX_N)
    suffix: str | None = None

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, suffix: str | None) -> str | None:
        if suffix:
            raise ValueError("not supported: this server does not insert text between a prompt and a suffix")
        return suffix

    @model_validator(mode="after")
    def _best_of_is_n(self) -> _CompletionSchemaFields:
        n = getattr(self, "n", 1)
        if self.best_of is not None and self.best_of != n:
            raise ValueError(
                f"best_of: only best_of equal to n ({n}) is supported; ask for n choices and rank them yourself"
            )
        if self.echo and getattr(self, "logprobs", None) is not None:
            raise ValueError("echo: the prompt's logprobs are not computed; send echo or logprobs, not both")
        return self


class _ChatSchemaFields(_Request):
    """Chat fields accepted and ignored (no effect on a self-hosted model; reasons in docs/api.md), and the
    ones refused because ignoring them would promise what is not done (audio output, the deprecated
    ``functions``). Chat has no ``echo``: it is refused by name, even with ``--ignore-unknown-fields``."""

    refused_fields: ClassVar[dict[str, str]] = {
        "echo": "not supported by chat completions (OpenAI's chat has no echo); use /v1/completions"
    }

    store: bool | None = None
    metadata: Annotated[dict[str, str], Field(max_length=16)] | None = None
    service_tier: str | None = None
    prediction: dict[str, Any] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    audio: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    web_search_options: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    safety_identifier: str | None = None
    moderation: dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _refused_by_name(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, reason in cls.refused_fields.items():
                if name in data:
                    raise ValueError(f"{name}: {reason}")
        return data

    @field_validator("modalities")
    @classmethod
    def _text_only(cls, modalities: list[str] | None) -> list[str] | None:
        if modalities and "audio" in modalities:
            raise ValueError("only text output is supported; 'audio' is not")
        return modalities

    @field_validator("audio")
    @classmethod
    def _no_audio(cls, audio: dict[str, Any] | None) -> dict[str, Any] | None:
        if audio is not None:
            raise ValueError("audio output is not supported; leave audio unset")
        return audio

    @field_validator("functions", "function_call")
    @classmethod
    def _deprecated_functions(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("deprecated by OpenAI and not supported; use tools and tool_choice instead")
        return value

    @model_validator(mode="after")
    def _one_output_limit(self) -> _ChatSchemaFields:
        old, new = getattr(self, "max_tokens", None), getattr(self, "max_completion_tokens", None)
        if old is not None and new is not None and old != new:
            raise ValueError(
                f"max_completion_tokens: differs from max_tokens ({new} != {old}); send one of them "
                "(max_completion_tokens is OpenAI's newer name for max_tokens)"
            )
        return self


class CompletionRequest(_CompletionSchemaFields, _SamplingFields):
    """``POST /v1/completions``. ``prompt`` is text, token ids, or a list of either (one choice set each)."""

    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)

    @field_validator("prompt")
    @classmethod
    def _prompt_not_empty(cls, prompt: str | list) -> str | list:
        prompts = prompt if isinstance(prompt, list) else [prompt]
        if not prompts or any(p == "" or p == [] for p in prompts):
            raise ValueError("must not be empty")
        return prompt

    def prompts(self) -> list[str | list[int]]:
        """Each prompt of the batch."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


class TextContentPart(_Request):
    type: Literal["text"]
    text: str


class ChatMessage(_Request):
    """One message; ``content`` is text or a list of text parts (images are not supported). An assistant message
    may carry the ``tool_calls`` it made, and a ``tool`` message answers one of them (``tool_call_id``)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None

    @model_validator(mode="after")
    def _calls_from_the_assistant(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("tool_calls: only an assistant message carries tool calls")
        return self

    def text(self) -> str:
        """The content as one string."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates receive it; the gateway renders exactly this to hash the prompt."""
        message: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.name:
            message["name"] = self.name
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            message["tool_calls"] = [call.for_template() for call in self.tool_calls]
        return message


class ChatCompletionRequest(_ChatSchemaFields, ToolFields, _SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    add_generation_prompt: bool = True

    @model_validator(mode="after")
    def _logprob_fields_agree(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs: requires logprobs to be true")
        return self

    @model_validator(mode="after")
    def _one_constraint_with_tools(self) -> ChatCompletionRequest:
        """A required or named tool call is itself a constraint on the output (``shoal.protocol.structured_output``)."""
        named = self.output_constraints()
        if self.tool_mode() in ("required", "named") and named:
            raise ValueError(f"tool_choice: only one field may constrain the output, got {named[0]} and tool_choice")
        return self

    def output_limit(self) -> int | None:
        """``max_completion_tokens`` (the new name) wins over ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# ---- responses -------------------------------------------------------------------------------------------

FinishReason = Literal["stop", "length", "abort", "tool_calls"]


def new_id(prefix: str) -> str:
    """An OpenAI-style object id."""
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    return int(time.time())


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionLogprobs(BaseModel):
    """Legacy completions logprobs: parallel lists, one entry per generated token."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now_s)
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None


class CompletionStreamResponse(CompletionResponse):
    """A streamed chunk: the same object as the full response with text deltas."""


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] | None = None


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now_s)
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatStreamChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None


class ChatCompletionStreamResponse(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=now_s)
    model: str
    choices: list[ChatStreamChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now_s)
    owned_by: str = "shoal"
    max_model_len: int | None = None
    # Shoal's extension: the engine's scheduler limits, from which a gateway knows the replica's capacity.
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None  # tokens per KV block: a gateway hashes prompts with it (shoal.gateway.block_size)
    # vLLM's: a LoRA adapter's card names where it was loaded from (root) and the base model it adapts (parent).
    root: str | None = None
    parent: str | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
