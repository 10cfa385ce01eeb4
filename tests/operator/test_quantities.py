"""Every memory quantity the CRD accepts becomes whole bytes, exactly as Kubernetes reads it (rounded up)."""

from __future__ import annotations

import decimal
import math
import re

from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from shoal.operator.builders.engine import serve_args
from shoal.operator.quantity import quantity_bytes
from shoal.operator.spec import InferenceDeploymentSpec


def _pattern() -> str:
    """The pattern the generated CRD enforces on ``engine.kvCacheMemory`` (read from the schema, not copied)."""
    field = InferenceDeploymentSpec.model_json_schema()["$defs"]["EngineSpec"]["properties"]["kvCacheMemory"]
    options = field.get("anyOf", [field])
    return next(option["pattern"] for option in options if "pattern" in option)


@given(st.from_regex(_pattern(), fullmatch=True))
def test_any_accepted_quantity_is_whole_bytes_as_kubernetes_reads_it(quantity: str) -> None:
    with decimal.localcontext(prec=200):  # the reference computes in the context's precision; make it exact
        expected = math.ceil(parse_quantity(quantity))
    assert quantity_bytes(quantity) == expected


def test_milli_bytes_round_up_instead_of_raising() -> None:
    assert re.fullmatch(_pattern(), "500m")
    assert quantity_bytes("500m") == 1
    assert quantity_bytes("1.1Gi") == math.ceil(1.1 * 2**30)


def test_the_engine_gets_the_bytes() -> None:
    spec = InferenceDeploymentSpec.model_validate(
        {"model": {"source": "smollm2-135m"}, "engine": {"kvCacheMemory": "1.5Ki"}}
    )
    args = serve_args(spec)
    assert args[args.index("--kv-cache-bytes") + 1] == "1536"
