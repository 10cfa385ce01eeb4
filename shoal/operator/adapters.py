"""``spec.adapters``: the LoRA adapters every engine serves, and the rules that refuse a bad list.

An adapter is a PEFT directory (``adapter_config.json``, ``adapter_model.safetensors``) named by a source of the
forms a model's takes: ``hf://ORG/REPO[@REVISION]`` and ``s3://BUCKET/PREFIX`` are fetched by an init container
into the model cache, an absolute path is read where it is (under ``/model-cache``, the model's claim, or the
image). Each rule is written twice from one table, as CEL and as Python, in the same words (as
:mod:`.model_source` does for ``spec.model``): on one adapter (``SOURCE_RULES``, ``self`` the adapter), and
across the list (``LIST_RULES``, ``self`` the spec): names unique, none the served model's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic.json_schema import JsonDict

from shoal.operator.model_source import NAME_PART, REPO_ID, S3, Rule, matches

NAME = "^[A-Za-z0-9][A-Za-z0-9._:/-]*$"  # a model name clients send; no '=' (the flag is NAME=PATH), no spaces
MAX_ADAPTERS = 64  # bounds the CEL rules' cost (uniqueness is quadratic)
RUNTIME_SLOTS = 4  # kind shoal's adapter slots without engine.maxLoras: one per adapter would roll on a change
HF_DIR = f"^hf://{NAME_PART}/{NAME_PART}(@{NAME_PART})?$"
FORMS = "hf://ORG/REPO[@REVISION], s3://BUCKET/PREFIX, or an absolute path in the engine pod"


def fetched(source: str) -> bool:
    """Whether an init container downloads the adapter (hf://, s3://) rather than the engine reading it in place."""
    return source.startswith(("hf://", "s3://"))


def _src(adapter: dict[str, object]) -> str:
    return str(adapter.get("source", ""))


SOURCE_RULES: tuple[Rule, ...] = (
    Rule(
        f"!self.source.matches('{REPO_ID}')",
        "spec.adapters: adapter '{name}': source '{source}' looks like a Hugging Face repo id: write hf://{source}",
        lambda a: not matches(REPO_ID, _src(a)),
    ),
    Rule(
        f"self.source.matches('{HF_DIR}') || self.source.matches('{S3}') || self.source.startsWith('/')",
        "spec.adapters: adapter '{name}': source '{source}' is not a PEFT adapter's directory; give " + FORMS,
        lambda a: matches(HF_DIR, _src(a)) or matches(S3, _src(a)) or _src(a).startswith("/"),
    ),
)

_SERVED = "(has(self.model.servedName) ? self.model.servedName : self.model.source)"


@dataclass(frozen=True)
class ListRule:
    """A rule across ``spec.adapters`` (``self`` the spec): CEL, its message (or a CEL expression for it), and in
    Python the message for a spec that breaks it (``None`` when it holds)."""

    cel: str
    message: str  # the apiserver's words; with a message_expression, only its fallback
    problem: Callable[[Sequence[str], str], str | None]  # (adapter names, served name) -> message
    message_expression: str | None = None

    def validation(self) -> JsonDict:
        entry: JsonDict = {"rule": f"!has(self.adapters) || {self.cel}", "message": self.message}
        if self.message_expression is not None:
            entry["messageExpression"] = self.message_expression
        return entry | {"fieldPath": ".adapters"}


_UNIQUE = "spec.adapters: two adapters have the same name; a name is what a request sends as model, so it is unique"


def _duplicate(names: Sequence[str], _: str) -> str | None:
    return None if len(set(names)) == len(names) else _UNIQUE


def _served(names: Sequence[str], served: str) -> str | None:
    if served not in names:
        return None
    return f"spec.adapters: adapter '{served}' has the served model's name; requests could not tell them apart"


LIST_RULES: tuple[ListRule, ...] = (
    ListRule("self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name))", _UNIQUE, _duplicate),
    ListRule(
        f"self.adapters.all(a, a.name != {_SERVED})",
        "spec.adapters: an adapter has the served model's name",
        _served,
        f"'spec.adapters: adapter \\'' + {_SERVED} + '\\' has the served model\\'s name; requests could not tell "
        "them apart'",
    ),
)

SLOTS_RULE = (
    "!has(self.engine) || (!has(self.engine.maxLoras) && !has(self.engine.maxLoraRank)) || "
    "(has(self.adapters) && size(self.adapters) > 0)",
    "spec.engine.maxLoras and maxLoraRank size the adapter slots: set them only with spec.adapters",
)


def problem(names: Sequence[str], served: str) -> str | None:
    """The first rule across the adapters that ``names`` break, as the apiserver words it."""
    return next((text for rule in LIST_RULES if (text := rule.problem(names, served)) is not None), None)
