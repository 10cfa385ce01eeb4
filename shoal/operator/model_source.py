"""What ``spec.model.source`` names, told apart by its form alone (no I/O), and the rules that refuse a typo.

A source is one of five kinds: ``hf://ORG/REPO[@REVISION][/FILE.gguf]`` and ``s3://BUCKET/PREFIX`` are fetched
by an init container (``shoal fetch-model``); ``pvc://CLAIM/PATH`` is a path inside a PersistentVolumeClaim the
pods mount read-only; a bundled alias and an absolute path are read as they are. Each rule below is written
twice from one table, as a CEL rule the apiserver enforces and as the check the pydantic model runs (``shoal up``
and the operator), with the same message, so ``kubectl apply`` and ``shoal up`` refuse the same input in the same
words. The patterns use the subset of syntax that RE2 (CEL's ``matches``) and Python's ``re`` read alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic.json_schema import JsonDict

SourceKind = Literal["hf", "s3", "pvc", "alias", "path"]
FETCHED_KINDS: tuple[SourceKind, ...] = ("hf", "s3")

NAME_PART = "[A-Za-z0-9][A-Za-z0-9._-]*"
REPO_ID = f"^{NAME_PART}/{NAME_PART}$"
HF = f"^hf://{NAME_PART}/{NAME_PART}(@{NAME_PART})?(/([A-Za-z0-9._-]+/)*[A-Za-z0-9._-]+[.]gguf)?$"
S3 = "^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^ ]*)?$"
PVC = "^pvc://[a-z0-9]([a-z0-9.-]*[a-z0-9])?(/[^ ]*)?$"
ALIAS = f"^{NAME_PART}$"
ANY_SCHEME = "^[A-Za-z][A-Za-z0-9+.-]*://"
KNOWN_SCHEME = "^(hf|s3|pvc)://"
FETCHED_SCHEME = "^(hf|s3)://"

FORMS = (
    "hf://ORG/REPO[@REVISION][/FILE.gguf], s3://BUCKET/PREFIX, pvc://CLAIM/PATH, a bundled alias or an absolute path"
)


def matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text) is not None


def kind(source: str) -> SourceKind:
    """The kind of a source that passed :func:`problem` (anything else without a scheme counts as a path)."""
    if source.startswith("hf://"):
        return "hf"
    if source.startswith("s3://"):
        return "s3"
    if source.startswith("pvc://"):
        return "pvc"
    return "alias" if matches(ALIAS, source) else "path"


def pvc_parts(source: str) -> tuple[str, str]:
    """``pvc://CLAIM/PATH`` -> (CLAIM, PATH), PATH without its leading slash ('' for the claim's root)."""
    claim, _, path = source.removeprefix("pvc://").partition("/")
    return claim, path.strip("/")


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Rule:
    """One admission rule on an object holding a source (``spec.model``, an item of ``spec.adapters``): its CEL
    text, its message (``{source}``, ``{name}``: that field of the object, which the apiserver fills in through a
    CEL ``messageExpression``) and the same check in Python."""

    cel: str
    message: str
    check: Callable[[dict[str, object]], bool]

    def text(self, obj: dict[str, object]) -> str:
        """The message for ``obj`` exactly as the apiserver writes it."""
        return _PLACEHOLDER.sub(lambda m: str(obj.get(m.group(1), "")), self.message)

    def validation(self) -> JsonDict:
        """The rule as an ``x-kubernetes-validations`` entry (``message`` is only the apiserver's fallback)."""
        entry: JsonDict = {"rule": self.cel, "message": _PLACEHOLDER.sub("...", self.message)}
        parts = _PLACEHOLDER.split(self.message)  # literal, field, literal, ...
        if len(parts) > 1:
            terms = [f"self.{p}" if i % 2 else "'" + p.replace("'", "\\'") + "'" for i, p in enumerate(parts) if p]
            entry["messageExpression"] = " + ".join(terms)
        return entry


def _src(model: dict[str, object]) -> str:
    return str(model.get("source", ""))


def _has(field: str) -> Callable[[dict[str, object]], bool]:
    return lambda model: model.get(field) is not None


RULES: tuple[Rule, ...] = (
    Rule(
        f"!self.source.matches('{REPO_ID}')",
        "spec.model.source '{source}' looks like a Hugging Face repo id: write hf://{source}",
        lambda m: not matches(REPO_ID, _src(m)),
    ),
    Rule(
        f"!self.source.matches('{ANY_SCHEME}') || self.source.matches('{KNOWN_SCHEME}')",
        "spec.model.source '{source}': unsupported scheme; supported: " + FORMS,
        lambda m: not matches(ANY_SCHEME, _src(m)) or matches(KNOWN_SCHEME, _src(m)),
    ),
    Rule(
        f"!self.source.startsWith('hf://') || self.source.matches('{HF}')",
        "spec.model.source '{source}': an hf:// source is hf://ORG/REPO[@REVISION][/FILE.gguf]",
        lambda m: not _src(m).startswith("hf://") or matches(HF, _src(m)),
    ),
    Rule(
        f"!self.source.startsWith('s3://') || self.source.matches('{S3}')",
        "spec.model.source '{source}': an s3:// source is s3://BUCKET/PREFIX (a bucket name of 3 to 63 "
        "lowercase letters, digits, dots and hyphens)",
        lambda m: not _src(m).startswith("s3://") or matches(S3, _src(m)),
    ),
    Rule(
        f"!self.source.startsWith('pvc://') || self.source.matches('{PVC}')",
        "spec.model.source '{source}': a pvc:// source is pvc://CLAIM/PATH (CLAIM a PersistentVolumeClaim's name)",
        lambda m: not _src(m).startswith("pvc://") or matches(PVC, _src(m)),
    ),
    Rule(
        f"self.source.matches('{ANY_SCHEME}') || self.source.startsWith('/') || self.source.matches('{ALIAS}') "
        f"|| self.source.matches('{REPO_ID}')",
        "spec.model.source '{source}' is a relative path: give " + FORMS,
        lambda m: any(
            (
                matches(ANY_SCHEME, _src(m)),
                _src(m).startswith("/"),
                matches(ALIAS, _src(m)),
                matches(REPO_ID, _src(m)),
            )
        ),
    ),
    Rule(
        f"!has(self.credentialsSecret) || self.source.matches('{FETCHED_SCHEME}')",
        "spec.model.credentialsSecret is used only to fetch hf:// and s3:// sources (it becomes the environment of "
        "the fetch init container); this source is not fetched",
        lambda m: not _has("credentialsSecret")(m) or matches(FETCHED_SCHEME, _src(m)),
    ),
    Rule(
        "!has(self.s3Endpoint) || self.source.startsWith('s3://')",
        "spec.model.s3Endpoint is the endpoint of an s3:// source's store; this source is not s3://",
        lambda m: not _has("s3Endpoint")(m) or _src(m).startswith("s3://"),
    ),
    Rule(
        f"!has(self.cache) || self.source.matches('{FETCHED_SCHEME}')",
        "spec.model.cache is where hf:// and s3:// sources are fetched to; this source is not fetched",
        lambda m: not _has("cache")(m) or matches(FETCHED_SCHEME, _src(m)),
    ),
    Rule(
        f"!has(self.volume) || !self.source.matches('{KNOWN_SCHEME}')",
        "spec.model.volume mounts a claim for a path source; an hf:// or s3:// source is fetched (spec.model.cache "
        "says where) and a pvc:// source mounts its own claim",
        lambda m: not _has("volume")(m) or not matches(KNOWN_SCHEME, _src(m)),
    ),
)


def problem(obj: dict[str, object], rules: tuple[Rule, ...] = RULES) -> str | None:
    """The first of ``rules`` that ``obj`` (``spec.model`` as on the wire, camelCase, unless other rules are given)
    breaks, as the apiserver words it."""
    return next((rule.text(obj) for rule in rules if not rule.check(obj)), None)
