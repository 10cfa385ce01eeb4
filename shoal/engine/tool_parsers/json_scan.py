"""Reading JSON that may still be growing: where a value ends, and an object's members so far.

A streamed tool call is a JSON object of which only a prefix has been generated. These functions never parse a
prefix into values (no partial-JSON guesses): they find where each member's value starts and, once written, where it
ends, so the caller can take the raw text of a value while it grows. A value's raw text only ever grows, which is
what makes argument fragments safe to stream. Whether the whole object is valid JSON is ``json.loads``' call, once
it is closed.
"""

from __future__ import annotations

import json

WHITESPACE = " \t\r\n"
_SCALAR_END = ",}]" + WHITESPACE


def skip_whitespace(text: str, i: int) -> int:
    while i < len(text) and text[i] in WHITESPACE:
        i += 1
    return i


def value_end(text: str, start: int) -> int | None:
    """The index just past the JSON value opening at ``start``, or ``None`` while the text ends inside it.
    Brackets are matched outside strings; the value is not otherwise checked."""
    n = len(text)
    if text[start] == '"':
        j = start + 1
        while j < n:
            if text[j] == "\\":
                j += 2
            elif text[j] == '"':
                return j + 1
            else:
                j += 1
        return None
    if text[start] in "{[":
        depth, in_string, j = 0, False, start
        while j < n:
            ch = text[j]
            if in_string:
                if ch == "\\":
                    j += 1
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return None
    j = start
    while j < n and text[j] not in _SCALAR_END:
        j += 1
    return j if j < n else None  # a number at the very end may still grow


Span = tuple[int, int | None]  # a member value's start, and its end once written


def object_members(text: str, start: int) -> dict[str, Span]:
    """The members of the object opening at ``text[start] == "{"`` whose values have begun, keyed by name. Reading
    stops at the end of the text or at anything that is not JSON object syntax."""
    members: dict[str, Span] = {}
    i = skip_whitespace(text, start + 1)
    while i < len(text) and text[i] != "}":
        if text[i] == ",":
            i = skip_whitespace(text, i + 1)
            continue
        if text[i] != '"':
            break
        key_end = value_end(text, i)
        if key_end is None:
            break
        try:
            key = json.loads(text[i:key_end])
        except json.JSONDecodeError:
            break
        i = skip_whitespace(text, key_end)
        if i >= len(text) or text[i] != ":":
            break
        i = skip_whitespace(text, i + 1)
        if i >= len(text):
            break
        end = value_end(text, i)
        members[key] = (i, end)
        if end is None:
            break
        i = skip_whitespace(text, end)
    return members
