"""How each model family writes tool calls, as data: where the calls start, what stands between them, and the
key that holds the arguments. One table serves every family, since all of them write one JSON object per call:

| Parser (``--tool-call-parser``) | Output | Families |
|---|---|---|
| ``hermes`` | ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, repeated; text before is content | Qwen 2.5/3, Hermes |
| ``llama3_json`` | ``{"name": ..., "parameters": {...}}`` opening the output (``; `` between calls) | Llama 3.1-3.3 |
| ``mistral`` | ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``; text before is content | Mistral, Mixtral |

``REQUIRED`` is the shape the engine itself constrains a ``required`` tool choice to (``tool_grammar``): a JSON array
of ``{"name", "parameters"}`` objects. The parser is named on the command line or found in the chat template
(``detect``), which is how the checkpoint tells its format: the template is what taught the model to write it.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass

_ALPHANUMERIC = string.ascii_letters + string.digits


Choose = Callable[[str], str]  # picks one character: secrets.choice, or a seeded random.Random's choice


def openai_call_id(choose: Choose = secrets.choice) -> str:
    """``call_`` and 24 random characters, as OpenAI's ids look."""
    return "call_" + "".join(choose(_ALPHANUMERIC) for _ in range(24))


def mistral_call_id(choose: Choose = secrets.choice) -> str:
    """Nine alphanumerics: Mistral's chat templates refuse any other tool call id when the call goes back."""
    return "".join(choose(_ALPHANUMERIC) for _ in range(9))


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    start: str  # the marker before the first call; "" for output that opens with the calls
    separators: tuple[str, ...]  # what may stand around and between the calls' objects (the marker included)
    argument_keys: tuple[str, ...]  # the member holding the arguments, first match wins
    keeps_special_tokens: bool = False  # the marker is a special token: decode it rather than drop it
    call_id: Callable[[Choose], str] = openai_call_id


HERMES = ToolCallFormat("hermes", "<tool_call>", ("<tool_call>", "</tool_call>"), ("arguments",))
LLAMA3_JSON = ToolCallFormat("llama3_json", "", ("<|python_tag|>", ";"), ("parameters", "arguments"))
MISTRAL = ToolCallFormat(
    "mistral", "[TOOL_CALLS]", ("[TOOL_CALLS]", "[", ",", "]"), ("arguments",), True, mistral_call_id
)
REQUIRED = ToolCallFormat("required", "", ("[", ",", "]"), ("parameters",))

PARSERS = {f.name: f for f in (HERMES, LLAMA3_JSON, MISTRAL)}


def detect(chat_template: str | None) -> ToolCallFormat | None:
    """The format a chat template teaches, or ``None`` when it shows no tool calls (SmolLM2's, for one)."""
    template = chat_template or ""
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<tool_call>" in template:
        return HERMES
    if "<|python_tag|>" in template or ('"parameters"' in template and "ipython" in template):
        return LLAMA3_JSON
    return None
