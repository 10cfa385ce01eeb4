"""The spec reaches ``shoal gateway`` as its flags: the arguments the operator builds parse with the gateway's own
parser into the values the spec names (``spec.gateway.timeouts``, the engines' ``blockSize``), and the spec's
defaults are the gateway's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from shoal.cli import build_parser
from shoal.local.up import UpOptions, gateway_argv
from shoal.operator.builders.gateway import gateway_args, gateway_flags, gateway_settings
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


def test_shoal_up_runs_the_gateway_with_the_operators_settings(tmp_path: Path) -> None:
    """Every ``spec.gateway`` field set: ``shoal up``'s gateway parses to what the operator's does, except where
    each finds the engines, the tokenizer and the keys."""
    full = InferenceDeploymentSpec.model_validate(
        {
            "model": {"source": "hf://HuggingFaceTB/SmolLM2-135M-Instruct"},
            "engine": {"kind": "vllm", "blockSize": 32},
            "gateway": {
                "routingPolicy": "round-robin",
                "boundFactor": 1.5,
                "redisUrl": "redis://r:6379/0",
                "holdQueue": {"size": 5, "waitSeconds": 30},
                "timeouts": {
                    "connectSeconds": 0.5,
                    "firstTokenSeconds": 12,
                    "interTokenSeconds": 3.5,
                    "requestSeconds": 90,
                },
            },
        }
    )
    local_argv = gateway_argv(full, UpOptions(), tmp_path / "backends.txt", tmp_path / "dashboard.json")
    local = vars(build_parser().parse_args(local_argv[local_argv.index("gateway") :]))
    cluster = vars(parsed_gateway_flags(full))
    where = {"host", "port", "kube_service", "kube_port_name", "backends_file", "dashboard_data", "tokenizer"}
    where |= {"fetch_record", "api_keys", "log_level"}
    assert {key for key in local.keys() | cluster.keys() if local.get(key) != cluster.get(key)} <= where
    defaults = vars(parsed_gateway_flags(spec()))
    set_by_spec = {flag.removeprefix("--").replace("-", "_") for flag in gateway_flags(full)}
    assert {key for key in cluster if cluster[key] != defaults[key]} - where == set_by_spec
