"""The spec reaches ``shoal gateway`` as its flags: the arguments the operator builds parse with the gateway's own
parser into the values the spec names (``spec.gateway.timeouts``, the engines' ``blockSize``), and the spec's
defaults are the gateway's."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from shoal.cli import build_parser
from shoal.operator.builders.gateway import gateway_args, gateway_settings
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec
from shoal.protocol.gateway_timeouts import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_FIRST_TOKEN_TIMEOUT_S,
    DEFAULT_INTER_TOKEN_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
)

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")


def parsed_gateway_flags(spec: InferenceDeploymentSpec):  # type: ignore[no-untyped-def]
    """What ``shoal gateway`` reads from the pod's arguments once the kubelet expands ``$(VAR)``."""
    settings = gateway_settings(OWNER, spec)
    argv = [re.sub(r"\$\((\w+)\)", lambda m: settings[m.group(1)], arg) for arg in gateway_args(settings)]
    return build_parser().parse_args(argv)


def spec(**gateway: object) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, "gateway": gateway})


def test_the_spec_timeouts_become_the_gateway_flags() -> None:
    args = parsed_gateway_flags(
        spec(timeouts={"connectSeconds": 0.5, "firstTokenSeconds": 12, "interTokenSeconds": 3.5, "requestSeconds": 90})
    )
    assert (args.connect_timeout, args.first_token_timeout, args.inter_token_timeout, args.request_timeout) == (
        0.5,
        12.0,
        3.5,
        90.0,
    )


def test_the_defaults_are_the_gateways_own_and_distinct() -> None:
    args = parsed_gateway_flags(spec())
    defaults = (
        DEFAULT_CONNECT_TIMEOUT_S,
        DEFAULT_FIRST_TOKEN_TIMEOUT_S,
        DEFAULT_INTER_TOKEN_TIMEOUT_S,
        DEFAULT_REQUEST_TIMEOUT_S,
    )
    assert (args.connect_timeout, args.first_token_timeout, args.inter_token_timeout, args.request_timeout) == defaults
    assert len(set(defaults)) == 4


@pytest.mark.parametrize("field", ["connectSeconds", "firstTokenSeconds", "interTokenSeconds", "requestSeconds"])
def test_a_timeout_of_zero_is_refused_naming_the_field(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        spec(timeouts={field: 0})


def test_the_engines_block_size_is_the_one_the_gateway_expects() -> None:
    spec = InferenceDeploymentSpec.model_validate({"model": {"source": "smollm2-135m"}, "engine": {"blockSize": 32}})
    assert parsed_gateway_flags(spec).block_size == 32
