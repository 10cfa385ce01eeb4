"""Which failed passes are retried within seconds: an apiserver that cannot be reached, or that answers but cannot
serve yet (the restart test on the real control plane, ``test_apiserver_restart.py``, meets both); anything else
is kopf's to retry or report."""

from __future__ import annotations

import httpx
import pytest

from shoal.operator.handlers import apiserver_unavailable
from shoal.operator.kube import KubeError


def test_a_connection_refused_is_an_unreachable_apiserver() -> None:
    why = apiserver_unavailable(httpx.ConnectError("connection refused"))
    assert why is not None and why.startswith("the apiserver could not be reached")


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_an_apiserver_that_answers_but_cannot_serve_yet_is_retried_soon(status: int) -> None:
    error = KubeError(status, "the request has been made before all known HTTP paths have been installed")
    assert apiserver_unavailable(error) == f"the apiserver could not serve the pass yet ({error})"


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_a_refusal_is_not_an_outage(status: int) -> None:
    assert apiserver_unavailable(KubeError(status, "spec.engine.gpus: Invalid value")) is None
    assert apiserver_unavailable(ValueError("a bug")) is None
