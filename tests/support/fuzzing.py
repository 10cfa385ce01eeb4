"""Schemathesis against a server of the OpenAI API (an engine or the gateway): requests generated from the
shared request models' OpenAPI description (``support.openapi_schema``), valid and invalid alike, each of which
must be answered with something other than a 5xx (or a transport failure, a hang past ``timeout``)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.openapi import from_dict

from support.openapi_schema import openapi_document


def fuzz(base_url: str, examples: int, timeout: float = 60.0, seed: int = 0) -> list[str]:
    """Sends ``examples`` generated requests per operation and mode; returns what went wrong, one line each."""
    schema = from_dict(openapi_document())
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(max_examples=examples, deadline=None, database=None, derandomize=seed == 0,
                      suppress_health_check=list(HealthCheck))
            @given(st.data())
            def send(data: st.DataObject) -> None:
                case = data.draw(operation.as_strategy(generation_mode=mode))
                try:
                    response = case.call(base_url=base_url, timeout=timeout)
                except Exception as exc:  # noqa: BLE001 - a transport failure or hang is a finding too
                    failures.append(f"{operation.label} {mode.value}: {type(exc).__name__}: {exc}")
                    return
                if response.status_code >= 500:
                    failures.append(f"{operation.label} {mode.value}: {response.status_code} for "
                                    f"{case.body!r:.300}: {response.text[:200]}")

            try:
                send()
            except Unsatisfiable:  # nothing invalid to generate (an operation without parameters)
                pass
    return failures
