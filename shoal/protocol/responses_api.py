"""OpenAI's Responses API (``POST /v1/responses``) on the wire: the request, the response object, the stream's events.

A request is a conversation in other clothes: ``instructions`` (a system message first) and ``input`` (a string, or
a list of message items whose content is a string or ``input_text``/``output_text`` parts) become the chat
messages the chat template renders (``template_messages``, which the gateway renders too, so routing sees the
engine's tokens; a ``previous_response_id`` puts the conversation the engine stored before the input, which only
the engine can do). ``text.format`` is ``response_format`` under another name and shape (the schema sits beside
``type``, not under ``json_schema``), mapped onto the same ``ResponseFormat``. Every field of OpenAI's request
schema is honoured, ignored for the reason ``docs/api.md`` gives, or refused by name where ignoring it would
promise what is not done (conversation objects, hosted tools, background runs); as for chat, a field OpenAI does not
define is a 400 unless the server runs with ``--ignore-unknown-fields``. An item or content part
of a type not served is refused naming its place (``input[2].type``), not as a failed union. Torch-free: the
gateway validates with these models. Function tools, and the ``function_call`` and ``function_call_output`` items
that carry calls and their results back, are chat's under Responses' names (``shoal.protocol.responses_tools``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, field_validator, model_validator

from shoal.protocol.openai_api import (
    MAX_LOGPROBS,
    ChatMessage,
    ChatTokenLogprob,
    JsonSchemaFormat,
    ResponseFormat,
    SchemaName,
    _Request,
)
from shoal.protocol.responses_tools import (
    MAX_TOOLS,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    OutputFunctionCall,
    ResponsesToolChoice,
    chat_tool_fields,
    check_as_chat,
    refuse_unserved_tools,
)
from shoal.protocol.tools import ToolFields

ITEM_TYPES = ("message", "function_call", "function_call_output")
PART_TYPES = ("input_text", "output_text")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
Includable = Literal[  # OpenAI's; only the output text's logprobs can appear here, the rest name other outputs
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]


# ---- the request ------------------------------------------------------------------------------------------


class InputContent(_Request):
    """A text part: the user's (``input_text``) or an earlier answer's (``output_text``, passed back as it came)."""

    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None  # an earlier answer's: ignored, only its text is the model's context
    logprobs: list[Any] | None = None


class InputMessage(_Request):
    """A message item; an earlier answer's ``id``, ``status`` and ``phase`` are taken and ignored."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputContent]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class TextFormat(_Request):
    """``text.format``: ``text``, ``json_object``, or ``json_schema`` with its ``name`` and ``schema`` beside it."""

    type: Literal["text", "json_object", "json_schema"]
    name: SchemaName | None = None
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> TextFormat:
        with_schema = self.name is not None or self.json_schema is not None
        if self.type == "json_schema" and (self.name is None or self.json_schema is None):
            raise ValueError('name and schema are required with type "json_schema"')
        if self.type != "json_schema" and with_schema:
            raise ValueError('name and schema are only allowed with type "json_schema"')
        return self

    def as_response_format(self) -> ResponseFormat:
        """The same constraint as chat's ``response_format`` states it."""
        if self.type != "json_schema":
            return ResponseFormat(type=self.type)
        schema = JsonSchemaFormat.model_validate(
            {"name": self.name, "description": self.description, "schema": self.json_schema, "strict": self.strict}
        )
        return ResponseFormat(type="json_schema", json_schema=schema)


class TextConfig(_Request):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # ignored: no model here is trained to follow it


class ResponsesStreamOptions(_Request):
    include_obfuscation: bool = False  # ignored: no obfuscation padding is added to the events


def _refuse_unserved_items(items: Any) -> None:
    """Names the first item or content part of a type this server cannot take (before the typed validation, whose
    union errors would not name it)."""
    if not isinstance(items, list):
        return
    for i, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind is not None and kind not in ITEM_TYPES:
            raise ValueError(
                f"input[{i}].type: item type {kind!r} is not supported; supported: {', '.join(ITEM_TYPES)}"
            )
        content = item.get("content") if isinstance(item, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            part_type = part.get("type") if isinstance(part, dict) else None
            if part_type is not None and part_type not in PART_TYPES:
                raise ValueError(
                    f"input[{i}].content[{j}].type: content type {part_type!r} is not supported; "
                    f"supported: {', '.join(PART_TYPES)}"
                )


_ITEM_MODELS = {
    "message": "InputMessage",
    "function_call": "FunctionCallItem",
    "function_call_output": "FunctionCallOutputItem",
}


def _item_model(item: Any) -> str:
    """The model an item's ``type`` picks, by its class name (which an error's field name leaves out)."""
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")
    return _ITEM_MODELS.get(kind, str(kind))


InputItem = Annotated[
    Annotated[InputMessage, Tag("InputMessage")]
    | Annotated[FunctionCallItem, Tag("FunctionCallItem")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutputItem")],
    Discriminator(_item_model),
]


def _chat_messages(items: list[InputItem]) -> list[dict[str, Any]]:
    """Items as chat messages: a ``function_call`` joins the assistant message before it (the text the model wrote
    before its calls) or opens one, a ``function_call_output`` is a ``tool`` message, as chat sends them."""
    messages: list[ChatMessage] = []
    for item in items:
        if isinstance(item, InputMessage):
            messages.append(ChatMessage(role=item.role, content=item.text()))
        elif isinstance(item, FunctionCallOutputItem):
            messages.append(ChatMessage(role="tool", tool_call_id=item.call_id, content=item.text()))
        elif messages and messages[-1].role == "assistant":
            messages[-1].tool_calls = [*(messages[-1].tool_calls or []), item.as_chat()]
        else:
            messages.append(ChatMessage(role="assistant", tool_calls=[item.as_chat()]))
    return [m.for_template() for m in messages]


class ResponsesRequest(_Request):
    """``POST /v1/responses``."""

    model: str = Field(min_length=1)
    input: list[InputItem] | str
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    text: TextConfig | None = None
    stream: bool = False
    stream_options: ResponsesStreamOptions | None = None
    include: list[Includable] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    metadata: Annotated[dict[str, str], Field(max_length=16)] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    store: bool | None = None  # false: the response cannot be continued (previous_response_id)
    previous_response_id: str | None = Field(None, min_length=1)
    truncation: Literal["auto", "disabled"] | None = None
    tools: list[FunctionTool] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: ResponsesToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # refused where set: each would promise what is not done (reasons in docs/api.md)
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    background: bool | None = None
    # accepted and ignored: no effect on a self-hosted model without hosted tools or reasoning
    max_tool_calls: int | None = Field(None, ge=1)
    reasoning: dict[str, Any] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    context_management: list[dict[str, Any]] | None = None
    moderation: dict[str, Any] | None = None
    background_options: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    access_programs: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _served_item_types(cls, data: Any) -> Any:
        if isinstance(data, dict):
            _refuse_unserved_items(data.get("input"))
            refuse_unserved_tools(data.get("tools"))
        return data

    @model_validator(mode="after")
    def _tools_as_chat_checks_them(self) -> ResponsesRequest:
        tools = self.tool_fields()
        check_as_chat(tools)
        fmt = self.text.format if self.text is not None else None
        if tools.tool_mode() in ("required", "named") and fmt is not None and fmt.type != "text":
            raise ValueError("tool_choice: only one field may constrain the output, got text.format and tool_choice")
        return self

    @field_validator("input")
    @classmethod
    def _input_not_empty(cls, value: list[InputItem] | str) -> list[InputItem] | str:
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("conversation")
    @classmethod
    def _no_conversations(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("conversations are not supported; send the conversation in input or continue a response")
        return value

    @field_validator("prompt")
    @classmethod
    def _no_prompt_templates(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("stored prompt templates are not supported; send the text in instructions and input")
        return value

    @field_validator("background")
    @classmethod
    def _no_background(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("background responses are not supported; stream the response or wait for it")
        return value

    @field_validator("truncation")
    @classmethod
    def _no_truncation(cls, value: str | None) -> str | None:
        if value == "auto":
            raise ValueError('"auto" is not supported: an input longer than the context is refused, not cut')
        return value

    def input_messages(self) -> list[dict[str, Any]]:
        """The input as chat messages, as templates receive them (a string is one user message)."""
        if isinstance(self.input, str):
            return [{"role": "user", "content": self.input}]
        return _chat_messages(self.input)

    def template_messages(self, history: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The conversation as chat templates receive it: the instructions as a system message, the conversation
        continued (``previous_response_id``'s, without its instructions), then the input."""
        instructions = [{"role": "system", "content": self.instructions}] if self.instructions else []
        return [*instructions, *(history or []), *self.input_messages()]

    def tool_fields(self) -> ToolFields:
        """``tools``, ``tool_choice`` and ``parallel_tool_calls`` as a chat request states them."""
        return chat_tool_fields(self.tools, self.tool_choice, self.parallel_tool_calls)

    def text_format(self) -> ResponseFormat | None:
        """``text.format`` as chat's ``response_format``."""
        fmt = self.text.format if self.text is not None else None
        return fmt.as_response_format() if fmt is not None else None

    def logprobs(self) -> int | None:
        """Alternatives per token when the output text's logprobs are included (as vLLM reads ``include``)."""
        return (self.top_logprobs or 0) if LOGPROBS_INCLUDE in (self.include or []) else None


# ---- the response object ----------------------------------------------------------------------------------


def response_id(request_id: str) -> str:
    """The id of the response to a request: its request id (the gateway's, through one), so that a gateway knows
    which replica holds a response without reading it."""
    return f"resp_{request_id}"


ResponseStatus = Literal["completed", "incomplete", "in_progress", "failed"]


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[ChatTokenLogprob] | None = None


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[OutputText]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class ResponseError(BaseModel):
    code: Literal["server_error"] = "server_error"
    message: str


class ResponseObject(BaseModel):
    """The response as OpenAI shapes it; the request's settings are echoed as OpenAI echoes them."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: ResponseStatus
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    model: str
    output: list[OutputMessage | OutputFunctionCall] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    store: bool = True
    temperature: float = 1.0
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[Any] = Field(default_factory=list)
    top_logprobs: int | None = None
    top_p: float = 1.0
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None


# ---- the stream's events: each has a type and its place in the stream (sequence_number) ---------------------


class ResponseEvent(BaseModel):
    type: str
    sequence_number: int


class LifecycleEvent(ResponseEvent):
    """``response.created``, ``.in_progress``, ``.completed``, ``.incomplete``, ``.failed``."""

    response: ResponseObject


class OutputItemEvent(ResponseEvent):
    """``response.output_item.added`` and ``.done``."""

    output_index: int
    item: OutputMessage | OutputFunctionCall


class ContentPartEvent(ResponseEvent):
    """``response.content_part.added`` and ``.done``."""

    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class TextDeltaEvent(ResponseEvent):
    """``response.output_text.delta``."""

    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[ChatTokenLogprob] = Field(default_factory=list)


class TextDoneEvent(ResponseEvent):
    """``response.output_text.done``."""

    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[ChatTokenLogprob] = Field(default_factory=list)


class ArgumentsDeltaEvent(ResponseEvent):
    """``response.function_call_arguments.delta``: more of a call's arguments text."""

    item_id: str
    output_index: int
    delta: str


class ArgumentsDoneEvent(ResponseEvent):
    """``response.function_call_arguments.done``: the call's whole arguments text."""

    item_id: str
    output_index: int
    arguments: str
