"""One owner of the engine count: the spec (and `kubectl scale`) when autoscaling is off, the hook when on."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from shoal.operator.replicas import ScaleDecision, decide_replicas
from shoal.operator.spec import ROUTING_POLICIES, InferenceDeploymentSpec


def spec(**overrides: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, **overrides})


def test_autoscaling_off_the_spec_count_rules_and_a_proposal_is_ignored() -> None:
    s = spec(replicas={"min": 1, "max": 5, "count": 3})
    assert decide_replicas(s, current=1, proposal=ScaleDecision(5, "wish")).replicas == 3


def test_autoscaling_off_without_count_runs_min() -> None:
    assert decide_replicas(spec(replicas={"min": 2, "max": 5}), None, None).replicas == 2


def test_recommend_mode_leaves_the_count_to_the_spec() -> None:
    s = spec(replicas={"min": 1, "max": 8, "count": 2}, autoscaling={"enabled": True, "mode": "Recommend"})
    assert decide_replicas(s, current=2, proposal=ScaleDecision(6, "ScaleUpQueue: ...")).replicas == 2


def test_autoscaling_on_the_proposal_decides_and_the_spec_count_is_ignored() -> None:
    s = spec(replicas={"min": 1, "max": 8, "count": 2}, autoscaling={"enabled": True})
    proposal = ScaleDecision(5, "queue above target", 9.0, 1.5, rule="ScaleUpQueue")
    assert decide_replicas(s, current=2, proposal=proposal) == proposal


def test_without_metrics_the_count_is_held() -> None:
    s = spec(replicas={"min": 1, "max": 8}, autoscaling={"enabled": True})
    decision = decide_replicas(s, current=4, proposal=None)
    assert decision.replicas == 4 and decision.reason.startswith("MetricsMissing")
    assert decide_replicas(s, current=None, proposal=None).replicas == 1


def test_zero_without_a_gateway_keeps_one_engine() -> None:
    s = spec(replicas={"min": 0, "max": 4}, autoscaling={"enabled": True}, gateway={"replicas": 0})
    decision = decide_replicas(s, current=1, proposal=ScaleDecision(0, "ScaleToZero: idle"))
    assert (decision.replicas, decision.limited) == (1, "NoGateway")
    with_gateway = spec(replicas={"min": 0, "max": 4}, autoscaling={"enabled": True})
    assert decide_replicas(with_gateway, current=1, proposal=ScaleDecision(0, "ScaleToZero: idle")).replicas == 0


@given(low=st.integers(0, 10), span=st.integers(0, 10), wish=st.integers(-50, 50), current=st.integers(0, 30))
def test_the_autoscaler_is_always_clamped_to_the_bounds(low: int, span: int, wish: int, current: int) -> None:
    high = max(low + span, 1)
    s = spec(replicas={"min": low, "max": high}, autoscaling={"enabled": True})
    decision = decide_replicas(s, current, ScaleDecision(wish, "wish"))
    assert low <= decision.replicas <= high
    assert decision.limited == ("TooFewReplicas" if wish < low else "TooManyReplicas" if wish > high else None)


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ({"min": 3, "max": 2}, "replicas.min must be less than or equal to replicas.max"),
        ({"min": 1, "max": 2, "count": 5}, "replicas.count must lie between replicas.min and replicas.max"),
        ({"min": -1}, "greater than or equal to 0"),
    ],
)
def test_the_models_reject_what_the_apiserver_rejects(replicas: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(replicas=replicas)


def test_routing_policies_are_the_gateways() -> None:
    from shoal.gateway.routing import POLICY_NAMES

    assert sorted(ROUTING_POLICIES) == sorted(POLICY_NAMES)
