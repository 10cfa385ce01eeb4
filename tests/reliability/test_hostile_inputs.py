"""Hostile requests (encodings, nesting, sizes, types, huge n / max_tokens / logprobs, thousands of stop strings,
control characters) and schemathesis' generated ones, against a real engine and the gateway in front of it: a
4xx in OpenAI's error shape (or a 200 for what is odd but valid), never a 5xx, a crash or a hang; and the
servers keep serving with nothing left running. The generated cases follow the schema each server serves
at ``/openapi.json``; thousands of them: bench/fuzz.py."""

from __future__ import annotations

import httpx
import pytest
from hostile_inputs import HOSTILE
from support.fuzzing import fuzz

from shoal.local import metric

pytestmark = pytest.mark.timeout(600)


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:300]
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("target", ["engine", "gateway"])
@pytest.mark.parametrize(("name", "endpoint", "raw"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_a_hostile_request_is_a_client_error(
    targets: dict[str, str], target: str, name: str, endpoint: str, raw: bytes
) -> None:
    check(
        httpx.post(
            f"{targets[target]}/v1/{endpoint}", content=raw, timeout=60, headers={"Content-Type": "application/json"}
        )
    )


@pytest.mark.parametrize("target", ["engine", "gateway"])
def test_generated_requests_never_get_a_server_error(targets: dict[str, str], target: str) -> None:
    report = fuzz(targets[target], examples=15, model="tiny", max_tokens=4)
    assert report.failures == [], report.failures[:5]
    sent = {answer.rsplit(" ", 1)[0] for answer in report.answers}
    assert {
        f"POST /v1/{path} {mode}"
        for path in ("completions", "chat/completions", "responses")
        for mode in ("positive", "negative")
    } <= sent, report.answers


def test_the_servers_still_serve_and_hold_nothing(targets: dict[str, str]) -> None:
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 2}
    assert httpx.post(targets["gateway"] + "/v1/completions", json=body, timeout=60).status_code == 200
    assert metric(targets["engine"], "shoal_engine_requests_running") == 0
