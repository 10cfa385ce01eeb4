"""Schemathesis against a running server of the OpenAI API (an engine or the gateway), from the OpenAPI document
that server serves at ``/openapi.json`` (so the fuzzing follows what is served): requests generated valid and
invalid alike. Every answer must be something other than a 5xx (or a transport failure, a hang past
``timeout``), with a status the document lists, of the content type and (for JSON) the schema it declares."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import content_type_conformance, response_schema_conformance, status_code_conformance
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.openapi import from_url

CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


def fuzz(base_url: str, examples: int, timeout: float = 60.0, seed: int = 0,
         headers: Mapping[str, str] | None = None) -> list[str]:
    """Sends ``examples`` generated requests per operation and mode; returns what went wrong, one line each."""
    schema = from_url(f"{base_url}/openapi.json", headers=dict(headers or {}))
    failures: list[str] = []
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            failures.append(f"the served document has an operation schemathesis cannot read: {result.err()}")
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            send = _sender(result.ok(), mode, base_url, dict(headers or {}), timeout, failures)
            run = settings(max_examples=examples, deadline=None, database=None, derandomize=seed == 0,
                           suppress_health_check=list(HealthCheck))(given(st.data())(send))
            with contextlib.suppress(Unsatisfiable):  # nothing invalid to generate (no parameters)
                run()
    return failures


def _sender(operation: Any, mode: GenerationMode, base_url: str, headers: dict[str, str], timeout: float,
            failures: list[str]) -> Any:
    """One generated request of ``operation`` per call, sent and checked; what goes wrong lands in ``failures``."""
    where = f"{operation.label} {mode.value}"

    def send(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        try:
            response = case.call(base_url=base_url, timeout=timeout, headers=headers)
        except Exception as exc:  # a transport failure or a hang is a finding too
            failures.append(f"{where}: {type(exc).__name__}: {exc}")
            return
        if response.status_code >= 500:
            failures.append(f"{where}: {response.status_code} for {case.body!r:.300}: {response.text[:200]}")
            return
        try:
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, FailureGroup) as failure:
            found = " ".join(str(failure).split())  # schemathesis' report, on one line
            failures.append(f"{where}: {response.status_code} not as documented: {found:.400}")

    return send
