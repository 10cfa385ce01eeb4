"""What a request's structured-output fields ask of the engine: one grammar, named by the field it came from.

OpenAI's ``response_format`` (the Responses API's ``text.format`` takes the same form) and vLLM's extras (``guided_json``, ``guided_regex``, ``guided_choice``,
``guided_grammar`` and the newer ``structured_outputs``) all reduce to a ``GrammarSpec``: a kind, its source as
text (equal schemas share one compiled grammar; key order is kept, as it is the order of the output's keys),
and whether keywords the grammar library cannot enforce are refused (``strict``) or ignored. ``json_object`` is the schema ``{"type": "object"}``.
A chat's ``tool_choice`` of ``required`` or a named function is a grammar too (``tool_grammar``), as vLLM builds it:
a named function's output is its arguments object; ``required`` is a JSON array of ``{"name", "parameters"}``
objects, one per call (at most one without ``parallel_tool_calls``), each name one of ``tools`` with its parameters.
Torch-free and library-free: the engine compiles the spec, the gateway never needs to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from shoal.protocol.openai_api import ResponseFormat, StructuredOutputFields, StructuredOutputs
from shoal.protocol.tools import ToolFields

GrammarKind = Literal["json_schema", "regex", "choice", "grammar"]
ANY_JSON_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar to compile against a vocabulary. ``field`` names the request field in errors, not in the key."""

    kind: GrammarKind
    source: str
    strict: bool = False  # json_schema only: a keyword the library cannot enforce is an error, not ignored
    field: str = field(default="response_format", compare=False)

    @staticmethod
    def json_schema(schema: str | dict[str, Any], strict: bool, field: str) -> GrammarSpec:
        value = json.loads(schema) if isinstance(schema, str) else schema
        return GrammarSpec("json_schema", json.dumps(value), strict, field)

    @staticmethod
    def choice(choices: list[str], field: str) -> GrammarSpec:
        return GrammarSpec("choice", json.dumps(list(choices)), field=field)


def grammar_spec(req: StructuredOutputFields) -> GrammarSpec | None:
    """The grammar the request's output must follow, or ``None`` when it is unconstrained."""
    by_format = response_format_spec(req.response_format, "response_format")
    if by_format is not None:
        return by_format
    if req.guided_json is not None:
        return GrammarSpec.json_schema(req.guided_json, False, "guided_json")
    if req.guided_regex is not None:
        return GrammarSpec("regex", req.guided_regex, field="guided_regex")
    if req.guided_choice is not None:
        return GrammarSpec.choice(req.guided_choice, "guided_choice")
    if req.guided_grammar is not None:
        return GrammarSpec("grammar", req.guided_grammar, field="guided_grammar")
    if req.structured_outputs is not None:
        return _structured_outputs(req.structured_outputs)
    return None


def response_format_spec(fmt: ResponseFormat | None, field: str) -> GrammarSpec | None:
    """OpenAI's format (chat's ``response_format``, the Responses API's ``text.format``), named ``field`` in errors."""
    if fmt is not None and fmt.type == "json_object":
        return GrammarSpec.json_schema(ANY_JSON_OBJECT, False, field)
    if fmt is not None and fmt.json_schema is not None:
        spec = fmt.json_schema
        return GrammarSpec.json_schema(spec.json_schema, bool(spec.strict), field)
    return None


def _structured_outputs(so: StructuredOutputs) -> GrammarSpec:
    """vLLM's ``structured_outputs`` object; its validator guarantees exactly one constraint is set."""
    if so.json_schema is not None:
        return GrammarSpec.json_schema(so.json_schema, False, "structured_outputs.json")
    if so.regex is not None:
        return GrammarSpec("regex", so.regex, field="structured_outputs.regex")
    if so.choice is not None:
        return GrammarSpec.choice(so.choice, "structured_outputs.choice")
    if so.grammar is not None:
        return GrammarSpec("grammar", so.grammar, field="structured_outputs.grammar")
    return GrammarSpec.json_schema(ANY_JSON_OBJECT, False, "structured_outputs.json_object")


def tool_grammar(req: ToolFields, parameters_at: str = "tools[{}].function.parameters") -> GrammarSpec | None:
    """The grammar of a required or named tool call, or ``None`` when the model chooses (or has no tools);
    ``parameters_at`` names a tool's parameters in the request (Responses' tools are flat: ``tools[{}].parameters``)."""
    mode = req.tool_mode()
    named = req.named_tool()
    if named is not None:
        index = next(i for i, t in enumerate(req.tools or []) if t.function is named)
        return GrammarSpec.json_schema(named.arguments_schema(), bool(named.strict), parameters_at.format(index))
    if mode != "required":
        return None
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": t.function.name}, "parameters": t.function.arguments_schema()},
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for t in req.tools or []
    ]
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
    if req.parallel_tool_calls is False:
        schema["maxItems"] = 1
    strict = any(t.function.strict for t in req.tools or [])
    return GrammarSpec.json_schema(schema, strict, "tools")
