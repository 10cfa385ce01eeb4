"""Function tools in OpenAI's Responses API: the flat tool and choice shapes, the call items, and chat's view of them.

Responses states chat's tools in other shapes: a tool is ``{"type": "function", "name", "parameters", ...}``
(chat nests the function under ``function``), a named ``tool_choice`` is ``{"type": "function", "name"}``, a call
the model made is a ``function_call`` item with a ``call_id`` and its result a ``function_call_output`` item. Each
maps onto chat's model (``as_chat``, ``ToolFields``), so the prompt, the grammar of a required or named call, the
``auto`` gating and the parsing of the output are chat's, written once. Only function tools exist for a
self-hosted model: any other type (``web_search``, ``file_search``, ...) is refused naming ``tools[i].type``.
Torch-free: the gateway validates with these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from shoal.protocol.tools import (
    ChatTool,
    FunctionCall,
    FunctionDefinition,
    NamedFunction,
    NamedToolChoice,
    ToolCall,
    ToolChoiceMode,
    ToolFields,
    _Strict,
)

MAX_TOOLS = 128


class FunctionTool(FunctionDefinition):
    """``{"type": "function", "name", "description", "parameters", "strict"}``."""

    type: Literal["function"]

    def as_chat(self) -> ChatTool:
        """Chat's shape of this (already validated) tool."""
        function = FunctionDefinition.model_construct(**{k: getattr(self, k) for k in FunctionDefinition.model_fields})
        return ChatTool.model_construct(type="function", function=function)


class FunctionToolChoice(_Strict):
    """``{"type": "function", "name": ...}``: the model must call exactly this function."""

    type: Literal["function"]
    name: str

    def as_chat(self) -> NamedToolChoice:
        return NamedToolChoice(type="function", function=NamedFunction(name=self.name))


ResponsesToolChoice = ToolChoiceMode | FunctionToolChoice


class FunctionCallItem(_Strict):
    """A call the model made, passed back as input; an earlier answer's ``id`` and ``status`` are ignored."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def as_chat(self) -> ToolCall:
        return ToolCall(id=self.call_id, function=FunctionCall(name=self.name, arguments=self.arguments))


class OutputTextPart(_Strict):
    type: Literal["input_text", "output_text"]
    text: str


class FunctionCallOutputItem(_Strict):
    """The result of a call (``call_id``), passed to the model as chat's ``tool`` message."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[OutputTextPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(part.text for part in self.output)


def refuse_unserved_tools(tools: Any) -> None:
    """Names the first tool of a type other than ``function`` (before the typed validation, whose errors would
    complain of its missing ``name`` instead)."""
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind is not None and kind != "function":
            raise ValueError(
                f"tools[{i}].type: tool type {kind!r} is not supported; only function tools can be served here"
            )


def chat_tool_fields(
    tools: list[FunctionTool] | None, tool_choice: ResponsesToolChoice | None, parallel_tool_calls: bool | None
) -> ToolFields:
    """The request's tools as chat states them, for everything chat derives from them (the prompt's ``tools``,
    the plan, the grammar). ``none`` and ``auto`` without tools ask nothing, as OpenAI reads them here."""
    if not tools and tool_choice in ("none", "auto"):
        tool_choice = None
    return ToolFields.model_construct(
        tools=[t.as_chat() for t in tools] if tools else None,
        tool_choice=tool_choice.as_chat() if isinstance(tool_choice, FunctionToolChoice) else tool_choice,
        parallel_tool_calls=parallel_tool_calls,
    )


def check_as_chat(fields: ToolFields) -> None:
    """Chat's checks on the tools (names unique, a named choice among the tools, a choice needs tools), raised as
    the request's own error naming its field."""
    try:
        ToolFields.model_validate(fields.model_dump())
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        text = str(error["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{where}: {text}" if where else text) from None


class OutputFunctionCall(BaseModel):
    """A call in the response's ``output``: ``id`` is the item's, ``call_id`` what its output answers."""

    id: str
    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"]
