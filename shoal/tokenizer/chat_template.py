"""Renders chat templates the way Hugging Face's ``apply_chat_template`` does.

Templates come from checkpoints, i.e. from strangers, so they run in Jinja2's immutable sandbox. The
environment mirrors transformers': ``trim_blocks``/``lstrip_blocks``, loop controls, a ``tojson`` that does not
HTML-escape, ``raise_exception`` and ``strftime_now``; ``{% generation %}`` blocks (used by transformers to mask
training targets) render their body unchanged.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template refused the conversation (``raise_exception``) or is not valid Jinja."""


class _GenerationBlock(jinja2.ext.Extension):
    tags = {"generation"}  # noqa: RUF012 - jinja2.ext.Extension declares tags a mutable set

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat_template is not valid Jinja: {exc}") from exc


def render_chat(source: str, messages: list[dict[str, Any]], add_generation_prompt: bool, **variables: Any) -> str:
    """``variables`` carries the special tokens (``bos_token``, ``eos_token``...) and e.g. ``tools``."""
    try:
        return compile_template(source).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **variables
        )
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template rejected the messages: {exc}") from exc
