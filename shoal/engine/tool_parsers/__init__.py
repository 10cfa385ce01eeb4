"""Tool calls in a model's output: each family's format, the request's plan, and the streamed deltas."""

from shoal.engine.tool_parsers.extract import Extraction, ParsedCall, extract
from shoal.engine.tool_parsers.formats import PARSERS, ToolCallFormat, detect
from shoal.engine.tool_parsers.plan import ToolCallPlan, ToolParserSettings, plan_tool_calls
from shoal.engine.tool_parsers.stream import ToolCallStream

__all__ = [
    "PARSERS",
    "Extraction",
    "ParsedCall",
    "ToolCallFormat",
    "ToolCallPlan",
    "ToolCallStream",
    "ToolParserSettings",
    "detect",
    "extract",
    "plan_tool_calls",
]
