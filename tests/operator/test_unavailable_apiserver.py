"""Which failed passes are retried within seconds: an apiserver that cannot be reached, or that answers but cannot
serve yet (the restart test on the real control plane, ``test_apiserver_restart.py``, meets both); anything else
is kopf's to retry or report. And a discovery the restarted apiserver refuses (403 until its RBAC cache syncs,
also met by the restart test) does not fail a pass once the answer is known."""

from __future__ import annotations

import asyncio
import time
from typing import cast

import httpx
import pytest

from shoal.operator.handlers import apiserver_unavailable
from shoal.operator.kube import KubeClient, KubeError
from shoal.operator.reconciler import Reconciler


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


class Discovery:
    """A stand-in for the apiserver's discovery answers (only ``serves`` is called): each call pops the next."""

    def __init__(self, *answers: bool | KubeError) -> None:
        self.answers = list(answers)

    async def serves(self, group_version: str, plural: str) -> bool:
        answer = self.answers.pop(0)
        if isinstance(answer, KubeError):
            raise answer
        return answer


def test_a_refused_discovery_keeps_what_was_known_and_asks_again() -> None:
    forbidden = KubeError(403, 'cannot get path "/apis/monitoring.coreos.com/v1"')
    client = Discovery(True, True, forbidden, True, True)
    reconciler = Reconciler(client=cast(KubeClient, client))
    assert asyncio.run(reconciler.prometheus_operator(fresh=True)) is True
    reconciler._monitoring = (time.monotonic() - 3600, True)  # known, but stale: the next pass asks again
    assert asyncio.run(reconciler.prometheus_operator(fresh=True)) is True  # refused: what was known holds
    assert asyncio.run(reconciler.prometheus_operator(fresh=True)) is True  # asked again, answered
    assert client.answers == []


def test_a_refused_discovery_with_nothing_known_fails_the_pass() -> None:
    reconciler = Reconciler(client=cast(KubeClient, Discovery(KubeError(403, "forbidden"))))
    with pytest.raises(KubeError):
        asyncio.run(reconciler.prometheus_operator(fresh=True))
