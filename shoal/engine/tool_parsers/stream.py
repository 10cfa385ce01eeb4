"""One choice's tool calls as OpenAI streams and answers them, from the text generated so far.

Each ``update`` re-reads the whole text (``extract``) and sends what is new since the last: content, then for each
call a first delta with its ``id``, ``type`` and function name, then fragments of its arguments' raw JSON text, in
order, so that the concatenated fragments are the arguments of the final answer. A call is announced only once
its name is complete; with ``parallel_tool_calls`` false only the first call is kept. Call ids are random, or,
given a ``seed``, the same for every stream of that seed (a response's calls are read for its stream and again for
the store, and both must name them alike). A choice that made a call
and stopped finishes with ``"tool_calls"``. The non-streaming answer is the same object updated once, at the end.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from shoal.engine.tool_parsers.extract import Extraction, ParsedCall, extract
from shoal.engine.tool_parsers.formats import openai_call_id
from shoal.engine.tool_parsers.plan import ToolCallPlan
from shoal.protocol.tools import DeltaFunctionCall, DeltaToolCall, FunctionCall, ToolCall


@dataclass
class _Sent:
    id: str
    name: str
    arguments: str


class ToolCallStream:
    def __init__(self, plan: ToolCallPlan, seed: str | None = None) -> None:
        self._plan = plan
        self._choose = random.Random(seed).choice if seed is not None else secrets.choice
        self.content = ""  # what has been sent as content
        self._sent: list[_Sent] = []

    def update(self, text: str, final: bool) -> tuple[str, list[DeltaToolCall]]:
        """The content and call deltas that ``text`` (all the choice's text so far) adds to what was sent."""
        found = self._extract(text, final)
        content = ""
        if not (self._sent and not found.calls) and found.content.startswith(self.content):
            content = found.content[len(self.content) :]  # a call already sent keeps a cut-short rest out of content
        self.content += content
        calls = found.calls if self._plan.parallel else found.calls[:1]
        return content, [d for k, call in enumerate(calls) if (d := self._call_delta(k, call)) is not None]

    def finish_reason(self, reason: str | None) -> str | None:
        return "tool_calls" if self._sent and reason == "stop" else reason

    def message_content(self) -> str | None:
        """The answer's ``content``: ``None`` when it is only the calls (or whitespace around them)."""
        return None if self._sent and not self.content.strip() else self.content

    def tool_calls(self) -> list[ToolCall] | None:
        calls = [ToolCall(id=s.id, function=FunctionCall(name=s.name, arguments=s.arguments)) for s in self._sent]
        return calls or None

    def _extract(self, text: str, final: bool) -> Extraction:
        if self._plan.fmt is None:  # a named function: the output is its arguments, constrained to them
            return Extraction("", [ParsedCall(self._plan.function, text, final)])
        return extract(text, self._plan.fmt, final)

    def _call_delta(self, index: int, call: ParsedCall) -> DeltaToolCall | None:
        if call.name is None:
            return None
        if index == len(self._sent):
            make_id = self._plan.fmt.call_id if self._plan.fmt is not None else openai_call_id
            new_id = make_id(self._choose)
            self._sent.append(_Sent(new_id, call.name, call.arguments))
            function = DeltaFunctionCall(name=call.name, arguments=call.arguments)
            return DeltaToolCall(index=index, id=new_id, type="function", function=function)
        sent = self._sent[index]
        if len(call.arguments) <= len(sent.arguments) or not call.arguments.startswith(sent.arguments):
            return None
        fragment = call.arguments[len(sent.arguments) :]
        sent.arguments = call.arguments
        return DeltaToolCall(index=index, function=DeltaFunctionCall(arguments=fragment))
