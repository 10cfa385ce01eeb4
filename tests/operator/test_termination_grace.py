"""The engine pod's termination grace: sized from maxModelLen and the time per output token, capped, overridable by
``spec.engine.terminationGracePeriodSeconds``; the engine's ``--shutdown-grace`` is the drain inside it."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from shoal.operator.builders import build_children
from shoal.operator.builders.engine import serve_args
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.operator.termination import (
    DEFAULT_TPOT_SECONDS,
    DRAIN_MARGIN,
    EXIT_SECONDS,
    GRACE_CAP_SECONDS,
    MIN_GRACE_SECONDS,
    PRESTOP_SLEEP_SECONDS,
    drain_verdict,
    termination,
)

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")


def spec(**engine: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, "engine": engine})


def pod(s: InferenceDeploymentSpec) -> dict[str, Any]:
    built = {(c["kind"], c["metadata"]["name"]): c for c in build_children(OWNER, s, 2, prometheus_operator=False)}
    return built[("Deployment", "chat-engine")]["spec"]["template"]["spec"]


def shutdown_grace(s: InferenceDeploymentSpec) -> int:
    args = serve_args(s)
    return int(args[args.index("--shutdown-grace") + 1])


def test_the_drain_is_the_longest_request_at_the_observed_pace_with_margin() -> None:
    result = termination(2048, 0.05, gpus=1, explicit_grace_s=None)
    assert result.drain_s == 123  # ceil(2048 x 0.05 x 1.2)
    assert result.grace_s == PRESTOP_SLEEP_SECONDS + 123 + EXIT_SECONDS


def test_a_longer_context_or_a_slower_token_waits_longer() -> None:
    short, long = termination(1024, 0.05, 1, None), termination(4096, 0.05, 1, None)
    slow = termination(1024, 0.2, 1, None)
    assert short.grace_s < long.grace_s and short.grace_s < slow.grace_s


def test_without_an_observed_pace_the_devices_default_is_used() -> None:
    cpu, gpu = termination(1000, None, 0, None), termination(1000, None, 1, None)
    assert cpu.drain_s == math.ceil(1000 * DEFAULT_TPOT_SECONDS["cpu"] * DRAIN_MARGIN - 1e-6)
    assert gpu.drain_s == math.ceil(1000 * DEFAULT_TPOT_SECONDS["gpu"] * DRAIN_MARGIN - 1e-6)
    assert termination(1000, 0.0, 0, None) == cpu  # a pace of zero is no observation


def test_the_grace_is_capped_and_an_unknown_context_takes_the_cap() -> None:
    assert termination(131072, 0.05, 1, None).grace_s == GRACE_CAP_SECONDS
    assert termination(None, 0.01, 1, None).grace_s == GRACE_CAP_SECONDS
    assert termination(None, 0.01, 1, None).drain_s == GRACE_CAP_SECONDS - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS


def test_an_explicit_grace_wins_and_the_drain_is_what_it_leaves() -> None:
    result = termination(131072, 0.05, 1, explicit_grace_s=45)
    assert result.grace_s == 45 and result.drain_s == 45 - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS


def test_the_pod_and_the_engine_agree() -> None:
    s = spec(maxModelLen=2048, resources={"gpus": 0})
    grace = pod(s)["terminationGracePeriodSeconds"]
    assert grace == termination(2048, None, 0, None).grace_s
    assert shutdown_grace(s) == grace - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS
    assert pod(s)["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"] == PRESTOP_SLEEP_SECONDS


def test_the_spec_overrides_the_grace_with_the_core_api_name() -> None:
    s = spec(terminationGracePeriodSeconds=120)
    assert pod(s)["terminationGracePeriodSeconds"] == 120
    assert shutdown_grace(s) == 120 - PRESTOP_SLEEP_SECONDS - EXIT_SECONDS


@pytest.mark.parametrize("bad", [GRACE_CAP_SECONDS + 1, MIN_GRACE_SECONDS - 1, 0, -5])
def test_a_grace_outside_what_the_pod_allows_is_refused_naming_the_field(bad: int) -> None:
    with pytest.raises(ValidationError, match="terminationGracePeriodSeconds"):
        spec(terminationGracePeriodSeconds=bad)


def test_an_observed_pace_the_drain_allows_fits() -> None:
    fits, reason, message = drain_verdict(1000, 0.2, gpus=0, explicit_grace_s=None)  # needs 240 s of the default 300
    assert (fits, reason) == (True, "WithinGrace")
    assert "240 s" in message and "drain is 300 s" in message


def test_a_pace_slower_than_the_drain_allows_names_the_grace_to_set() -> None:
    fits, reason, message = drain_verdict(1000, 0.4, gpus=0, explicit_grace_s=None)  # 480 s > the 300 s drain
    assert (fits, reason) == (False, "GraceTooShort")
    assert f"terminationGracePeriodSeconds to {PRESTOP_SLEEP_SECONDS + 480 + EXIT_SECONDS}" in message
    # the same pace under an explicit grace long enough fits
    assert drain_verdict(1000, 0.4, 0, PRESTOP_SLEEP_SECONDS + 480 + EXIT_SECONDS)[0]


def test_past_the_cap_the_fix_is_a_shorter_context() -> None:
    fits, reason, message = drain_verdict(32768, 0.1, gpus=1, explicit_grace_s=None)
    assert (fits, reason) == (False, "GraceTooShort")
    assert f"{GRACE_CAP_SECONDS} s cap" in message and "maxModelLen" in message


def test_without_an_observation_or_a_length_the_grace_is_assumed() -> None:
    assert drain_verdict(1000, None, 0, None)[:2] == (True, "AssumedTPOT")
    assert "terminationGracePeriodSeconds" in drain_verdict(1000, None, 0, 120)[2]
    assert drain_verdict(None, 0.3, 0, None)[:2] == (True, "MaxModelLenUnset")


@given(st.integers(16, 65536), st.floats(0.001, 2.0), st.integers(0, 8))
def test_the_verdict_agrees_with_the_law(max_model_len: int, tpot: float, gpus: int) -> None:
    """It fits when the drain sized from the observed pace is shorter than the one applied, never when longer."""
    applied = termination(max_model_len, None, gpus, None).drain_s
    sized = termination(max_model_len, tpot, gpus, None).drain_s
    fits = drain_verdict(max_model_len, tpot, gpus, None)[0]
    assert (sized <= applied) if fits else (sized >= applied)
