"""Schemathesis against a running server of the OpenAI API (an engine or the gateway), from the OpenAPI document
that server serves at ``/openapi.json`` (so the fuzzing follows what is served): requests generated valid and
invalid alike. Every answer must be something other than a 5xx (or a transport failure, a hang past
``timeout``), with a status the document lists, of the content type and (for JSON) the schema it declares."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import content_type_conformance, response_schema_conformance, status_code_conformance
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.openapi import from_url

CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


@dataclass
class FuzzReport:
    """What went wrong, one line each, and how many answers of each status each operation and mode got."""

    failures: list[str] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)


def fuzz(
    base_url: str,
    examples: int,
    model: str,
    timeout: float = 60.0,
    seed_value: int | None = None,
    headers: Mapping[str, str] | None = None,
    max_tokens: int | None = None,
) -> FuzzReport:
    """Sends up to ``examples`` generated requests per operation and mode (fewer where hypothesis runs out of
    distinct ones); derandomized unless ``seed_value`` is given. Valid bodies name ``model`` (a served one), so
    that they get past the model check into tokenizing, admission and generation; with ``max_tokens`` they ask
    for at most that many tokens of at most two sequences (a short smoke: huge ``n`` and ``max_tokens`` are
    hostile inputs of their own)."""
    schema = from_url(f"{base_url}/openapi.json", headers=dict(headers or {}))
    report = FuzzReport()
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            report.failures.append(f"the served document has an operation schemathesis cannot read: {result.err()}")
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            send = _sender(result.ok(), mode, base_url, model, max_tokens, dict(headers or {}), timeout, report)
            run = settings(
                max_examples=examples,
                deadline=None,
                database=None,
                derandomize=seed_value is None,
                suppress_health_check=list(HealthCheck),
            )(given(st.data())(send))
            if seed_value is not None:
                run = seed(seed_value)(run)
            with contextlib.suppress(Unsatisfiable):  # nothing invalid to generate (no parameters)
                run()
    return report


def _sender(
    operation: Any,
    mode: GenerationMode,
    base_url: str,
    model: str,
    max_tokens: int | None,
    headers: dict[str, str],
    timeout: float,
    report: FuzzReport,
) -> Any:
    """One generated request of ``operation`` per call, sent and checked, into ``report``."""
    where = f"{operation.label} {mode.value}"

    def send(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        if mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
            case.body["model"] = model
            if max_tokens is not None:
                _clip(case.body, max_tokens)
        try:
            response = case.call(base_url=base_url, timeout=timeout, headers=headers)
        except Exception as exc:  # noqa: BLE001 - a transport failure or a hang is a finding too
            report.failures.append(f"{where}: {type(exc).__name__}: {exc}")
            return
        report.answers[f"{where} {response.status_code}"] += 1
        if response.status_code >= 500:
            report.failures.append(f"{where}: {response.status_code} for {case.body!r:.300}: {response.text[:200]}")
            return
        try:
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, FailureGroup) as failure:
            # schemathesis' report on one line, without its curl command (it would carry the API key)
            found = " ".join(str(failure).split("Reproduce with")[0].split())
            report.failures.append(f"{where}: {response.status_code} not as documented: {found:.400}")

    return send


def _clip(body: dict[str, Any], max_tokens: int) -> None:
    """At most ``max_tokens`` tokens of at most two sequences, whatever the body asked for (a Responses body, one
    with ``input``, in its ``max_output_tokens``)."""
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens", "min_tokens"):
        if isinstance(body.get(name), int):
            body[name] = min(body[name], max_tokens)
    limit = "max_output_tokens" if "input" in body else "max_tokens"
    if limit not in body and "max_completion_tokens" not in body:
        body[limit] = max_tokens
    if isinstance(body.get("n"), int):
        body["n"] = min(body["n"], 2)
