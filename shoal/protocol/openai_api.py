"""The OpenAI wire format for completions, chat completions and models, as pydantic models.

Requests forbid unknown fields, so a typo (``max_token``) is a 400 naming it rather than a silently ignored
option; besides OpenAI's own parameters they accept vLLM's sampling extras (``top_k``, ``min_p``,
``repetition_penalty``, ``ignore_eos``, ``min_tokens``, ``stop_token_ids``, ``skip_special_tokens``) that
the official SDK sends through ``extra_body``. Bounds that only depend on the request live here; bounds
that depend on the model (context length) are checked by the engine. Responses and streaming chunks follow
the shapes the official SDKs parse. Nothing here imports torch: the gateway parses the same models.

Structured output (``response_format``, vLLM's ``guided_*`` extras and its newer ``structured_outputs``) is
validated here for its shape only; whether a schema or grammar compiles is the engine's call (a 400 naming the
field, with the grammar library's message).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_N = 128
MAX_LOGPROBS = 20
MAX_STOP_SEQUENCES = 16
MAX_TOKEN_ID = 2**31 - 1  # past any vocabulary; the gateway hashes ids as 32-bit, the engine indexes int32/int64


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Request):
    include_usage: bool = False


# ---- structured output: OpenAI's response_format and vLLM's guided decoding extras ------------------------


class JsonSchemaFormat(_Request):
    """``response_format.json_schema``: the schema every output validates against (``strict`` as OpenAI's)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
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

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only allowed when stream is true")
        return self


TokenIds = Annotated[list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]], Field(min_length=1)]


class CompletionRequest(_SamplingFields):
    """``POST /v1/completions``. ``prompt`` is text, token ids, or a list of either (one choice set each)."""

    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _prompt_not_empty(cls, prompt: str | list) -> str | list:
        prompts = prompt if isinstance(prompt, list) else [prompt]
        if not prompts or any(p == "" or p == [] for p in prompts):
            raise ValueError("must not be empty")
        return prompt

    @field_validator("echo")
    @classmethod
    def _echo_unsupported(cls, echo: bool) -> bool:
        if echo:
            raise ValueError("echo is not supported")
        return echo

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
    """One message; ``content`` is text or a list of text parts (images are not supported)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The content as one string."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def for_template(self) -> dict[str, str]:
        """The message as chat templates receive it; the gateway renders exactly this to hash the prompt."""
        return {"role": self.role, "content": self.text(), **({"name": self.name} if self.name else {})}


class ChatCompletionRequest(_SamplingFields):
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

    def output_limit(self) -> int | None:
        """``max_completion_tokens`` (the new name) wins over ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# ---- responses -------------------------------------------------------------------------------------------

FinishReason = Literal["stop", "length", "abort"]


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


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
