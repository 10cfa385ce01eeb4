"""What a request's tools (chat's, or Responses' stated as chat's) ask of its output: nothing, a named call, a required call, or the model's choice.

``none`` leaves the output alone (the tools are still in the prompt, as vLLM renders them). A named function and
``required`` are constrained by their grammar (``shoal.protocol.structured_output.tool_grammar``), so their output
always parses: the named function's arguments, or the ``REQUIRED`` array. ``auto`` is the model's choice in its
family's format, which needs a parser and, as in vLLM, ``--enable-auto-tool-choice``: without them a request that
lets the model choose (``tool_choice`` ``auto``, or tools without a ``tool_choice``) is a 400 naming ``tool_choice``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.tool_parsers.formats import PARSERS, REQUIRED, ToolCallFormat, detect
from shoal.protocol.tools import ToolFields


@dataclass(frozen=True)
class ToolParserSettings:
    """The server's options: ``--tool-call-parser`` (``None``: found in the chat template) and
    ``--enable-auto-tool-choice``."""

    parser: str | None = None
    enable_auto_tool_choice: bool = False


@dataclass(frozen=True)
class ToolCallPlan:
    fmt: ToolCallFormat | None  # None: the whole output is the arguments of ``function``
    function: str | None
    parallel: bool  # parallel_tool_calls: false keeps the first call only


def plan_tool_calls(req: ToolFields, settings: ToolParserSettings, chat_template: str | None) -> ToolCallPlan | None:
    """How to read the request's output for tool calls; ``None`` when it is plain content."""
    mode = req.tool_mode()
    parallel = req.parallel_tool_calls is not False
    named = req.named_tool()
    if named is not None:
        return ToolCallPlan(None, named.name, parallel)
    if mode == "required":
        return ToolCallPlan(REQUIRED, None, parallel)
    if mode == "none":
        return None
    fmt = PARSERS[settings.parser] if settings.parser else detect(chat_template)
    if not settings.enable_auto_tool_choice or fmt is None:
        missing = "--enable-auto-tool-choice" if fmt is not None else "a tool-call parser"
        raise InvalidRequestError(
            "tool_choice",
            f'"auto" tool choice (the default when tools are given) needs {missing} on the server: start it with '
            "--enable-auto-tool-choice and --tool-call-parser (or a model whose chat template shows tool calls), "
            'or send tool_choice "required", "none" or a named function',
        )
    return ToolCallPlan(fmt, None, parallel)
