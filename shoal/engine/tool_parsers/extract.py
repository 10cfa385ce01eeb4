"""Splits a model's output, complete or still growing, into content and tool calls. Pure.

The content is the text before the calls (``hermes`` and ``mistral`` let a model write some first); the calls are
the JSON objects after the format's marker, read with ``json_scan`` so that a call still being written shows its
name once the name is complete and its arguments' raw text so far. While the output grows, text that may still
turn out to be a marker (``<tool_ca``) is held back from the content. At the end (``final``), the calls are those
whose object is valid JSON with a string ``name``, and a last one cut short (``max_tokens``) once its name was
written, as OpenAI answers a call cut by the length limit; an output with none is all content, as vLLM answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from shoal.engine.tool_parsers.formats import ToolCallFormat
from shoal.engine.tool_parsers.json_scan import object_members, skip_whitespace, value_end


@dataclass(frozen=True)
class ParsedCall:
    name: str | None  # None until the name's string is complete
    arguments: str  # the raw JSON text of the arguments so far
    complete: bool  # the call's object is closed, valid JSON, and names a function
    closed: bool = True  # False: the output ends inside the call's object


@dataclass(frozen=True)
class Extraction:
    content: str  # the text that is surely content
    calls: list[ParsedCall]


def extract(text: str, fmt: ToolCallFormat, final: bool) -> Extraction:
    """The content and calls of ``text`` in ``fmt``; ``final``: the output is complete."""
    if fmt.start:
        start = text.find(fmt.start)
        if start < 0:
            return Extraction(text if final else text[: len(text) - _partial_suffix(text, (fmt.start,))], [])
        content = text[:start]
    else:
        first = skip_whitespace(text, 0)
        if first == len(text):
            return Extraction(text if final else "", [])
        if not _opens_calls(text[first:], fmt):
            return Extraction(text, [])
        start, content = first, ""
    calls = _calls(text, start, fmt)
    if final:
        calls = [c for c in calls if c.complete or (not c.closed and c.name is not None)]
        return Extraction(content, calls) if calls else Extraction(text, [])
    return Extraction(content, [c for c in calls if c.name is not None])


def _partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """The length of the longest end of ``text`` that some marker starts with (and is not yet all of)."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


def _opens_calls(text: str, fmt: ToolCallFormat) -> bool:
    """Whether output that opens with its calls (no marker) does: an object, or a separator (or its beginning)."""
    return text.startswith("{") or any(s.startswith(text[: len(s)]) for s in fmt.separators)


def _calls(text: str, i: int, fmt: ToolCallFormat) -> list[ParsedCall]:
    """The call objects from ``i``, across the format's separators, until anything else or the end of the text."""
    calls: list[ParsedCall] = []
    while True:
        i = skip_whitespace(text, i)
        if i >= len(text):
            return calls
        separator = next((s for s in fmt.separators if text.startswith(s, i)), None)
        if separator is not None:
            i += len(separator)
            continue
        if text[i] != "{":
            return calls  # a partial separator at the end, or text after the calls
        end = value_end(text, i)
        calls.append(_call(text, i, end, fmt))
        if end is None:
            return calls
        i = end


def _call(text: str, start: int, end: int | None, fmt: ToolCallFormat) -> ParsedCall:
    members = object_members(text, start)
    name_start, name_stop = members.get("name", (0, None))
    name = _string(text[name_start:name_stop]) if name_stop is not None else None
    key = next((k for k in fmt.argument_keys if k in members), None)
    if key is None:
        arguments = "{}" if end is not None else ""
    else:
        value_start, value_stop = members[key]
        arguments = text[value_start : value_stop if value_stop is not None else len(text)]
    complete = end is not None and name is not None and _valid_json(text[start:end])
    return ParsedCall(name, arguments, complete, closed=end is not None)


def _string(text: str) -> str | None:
    """A complete JSON string's value, or ``None`` for any other value."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _valid_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True
