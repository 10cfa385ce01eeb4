"""OpenAI's function tools on chat completions: the request fields, the calls in messages and in answers.

``tools`` (function tools only), ``tool_choice`` (``"none"``, ``"auto"``, ``"required"`` or one named function) and
``parallel_tool_calls`` are validated here for what depends on the request alone, so the gateway refuses what the
engine would: each tool's ``parameters`` must be a valid JSON Schema (checked against the 2020-12 meta-schema),
names are unique, a named ``tool_choice`` names one of ``tools``, and a ``tool_choice`` needs ``tools``. What the
engine alone can judge (whether its grammar library compiles a schema, whether the model has a tool-call parser
for ``auto``) is its 400. Torch-free: the gateway parses the same models.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

ToolChoiceMode = Literal["none", "auto", "required"]
FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # OpenAI's rule for function names


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionDefinition(_Strict):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _a_json_schema(cls, parameters: dict[str, Any] | None) -> dict[str, Any] | None:
        if parameters is not None:
            try:
                jsonschema.Draft202012Validator.check_schema(parameters)
            except jsonschema.SchemaError as exc:
                where = "/".join(str(p) for p in exc.path)
                raise ValueError(f"not a valid JSON Schema{f' at {where}' if where else ''}: {exc.message}") from None
        return parameters

    def arguments_schema(self) -> dict[str, Any]:
        """The arguments' schema; a function without ``parameters`` takes an object, as OpenAI reads it."""
        return self.parameters if self.parameters is not None else {"type": "object"}


class ChatTool(_Strict):
    """``{"type": "function", "function": {...}}``: the only kind of tool a self-hosted model can call."""

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    """``{"type": "function", "function": {"name": ...}}``: the model must call exactly this function."""

    type: Literal["function"]
    function: NamedFunction


class FunctionCall(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends and answers it


class ToolCall(_Strict):
    """A call the assistant made: in an assistant message of the request, and in the answer."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall

    def for_template(self) -> dict[str, Any]:
        """As chat templates read it: ``arguments`` as an object where it is one (Llama 3.1's and Qwen's templates
        write ``arguments | tojson``), as vLLM passes it."""
        try:
            arguments: Any = json.loads(self.function.arguments)
        except json.JSONDecodeError:
            arguments = self.function.arguments
        if not isinstance(arguments, dict):
            arguments = self.function.arguments
        return {"id": self.id, "type": self.type, "function": {"name": self.function.name, "arguments": arguments}}


class _Unset(BaseModel):
    """Leaves out what a delta does not carry: SDKs merge each field of a delta into the call so far (the official
    one sets ``type`` from every delta that has the key), so a ``null`` would erase what an earlier delta said."""

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaFunctionCall(_Unset):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_Unset):
    """A streamed piece of a call: its first carries ``id``, ``type`` and the name, the next ones argument text."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall


class ToolFields(_Strict):
    """The tools fields of a chat completion request."""

    tools: list[ChatTool] | None = Field(None, max_length=128)
    tool_choice: ToolChoiceMode | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, tools: list[ChatTool] | None) -> list[ChatTool] | None:
        names = [t.function.name for t in tools or []]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"function names must be unique; {name!r} is given twice")
        return tools

    @model_validator(mode="after")
    def _choice_among_tools(self) -> ToolFields:
        if self.tool_choice is not None and not self.tools:
            raise ValueError("tool_choice: only allowed when tools are given")
        if isinstance(self.tool_choice, NamedToolChoice):
            name = self.tool_choice.function.name
            if self.named_tool() is None:
                raise ValueError(f"tool_choice: the function {name!r} is not among tools")
        return self

    def tool_mode(self) -> ToolChoiceMode | Literal["named"]:
        """What the model may do: no tools is ``none``; tools without a choice is ``auto``, as in OpenAI."""
        if not self.tools:
            return "none"
        if self.tool_choice is None:
            return "auto"
        return "named" if isinstance(self.tool_choice, NamedToolChoice) else self.tool_choice

    def named_tool(self) -> FunctionDefinition | None:
        """The function a named ``tool_choice`` forces."""
        if not isinstance(self.tool_choice, NamedToolChoice):
            return None
        name = self.tool_choice.function.name
        return next((t.function for t in self.tools or [] if t.function.name == name), None)


def template_variables(tools: list[ChatTool] | None) -> dict[str, Any]:
    """``tools`` as chat templates receive them (transformers' ``apply_chat_template(tools=...)``), or nothing:
    templates test ``if tools``."""
    return {"tools": [t.model_dump(exclude_none=True) for t in tools]} if tools else {}
