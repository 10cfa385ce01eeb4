"""The Alertmanager webhook receiver: bearer-token auth, v4 payloads, deduplication of retries, firing evaluates
and resolved does not, and a real Alertmanager's delivery (its retries included) to the receiver.

The receiver here runs with the real FleetAutoscaler; what it calls to evaluate a fleet is recorded by the test
(the operator's own evaluation pass is exercised end to end in ``test_operator_prometheus.py``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from support.kube_testbed import free_port
from support.polling import eventually
from support.services import Service, http_json, route_alerts_to_shoal

from shoal.autoscale import FleetSignals
from shoal.operator.alert_receiver import AlertReceiver, read_token, serve
from shoal.operator.autoscaler import FleetAutoscaler, FleetRef
from shoal.operator.metrics import OperatorMetrics

TOKEN = "s3cret-token"


class NoMetrics:
    """A fake observer: the receiver's tests never evaluate through it."""

    async def observe(self, fleet: FleetRef, desired: int, now: float) -> FleetSignals:
        return FleetSignals(time=now, desired=desired, missing="not used")

    def forget(self, key: tuple[str, str]) -> None:
        pass


class Receiver:
    """The receiver on a real port, in a thread with its own event loop; ``evaluated`` records each pass."""

    def __init__(self, token_file: Path, existing: set[tuple[str, str]]) -> None:
        self.autoscaler = FleetAutoscaler(NoMetrics())
        self.evaluated: list[tuple[str, str]] = []
        self.failures_left = 0
        self.existing = existing
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics = OperatorMetrics()
        self._receiver = AlertReceiver(
            read_token(token_file), self.autoscaler, self._evaluate, self.metrics.alert_webhook
        )
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        assert started.wait(10)

    async def _evaluate(self, namespace: str, name: str) -> float | None:
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("apiserver unreachable")
        self.evaluated.append((namespace, name))
        return time.perf_counter() if (namespace, name) in self.existing else None

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = self._loop.run_until_complete(serve(self._receiver, "127.0.0.1", self.port))
        started.set()
        self._loop.run_forever()

    def answered(self, code: int) -> float:
        """Requests the operator's webhook latency histogram counted with this status code."""
        return (
            self.metrics.registry.get_sample_value(
                "shoal_operator_alert_webhook_duration_seconds_count", {"code": str(code)}
            )
            or 0.0
        )

    def firing(self, namespace: str, name: str) -> bool:
        return bool(self.autoscaler._firing.get((namespace, name)))

    def stop(self) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")  # as a Secret key mounted from `kubectl create secret` often ends
    handle = Receiver(token_file, existing={("team-a", "chat")})
    yield handle
    handle.stop()


def alert(status: str, fingerprint: str, starts: str = "2026-01-01T00:00:00Z", **labels: str) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "ShoalEngineQueueBacklog", **labels},
        "annotations": {},
        "startsAt": starts,
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": fingerprint,
    }


def payload(*alerts: dict[str, Any], group_key: str = '{}:{alertname="ShoalEngineQueueBacklog"}') -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": alerts[0]["status"],
        "receiver": "shoal",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": list(alerts),
    }


def post(receiver: Receiver, body: Any, token: str | None = TOKEN, raw: bytes | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    if raw is not None:
        return httpx.post(receiver.url + "/alerts", content=raw, headers=headers, timeout=10)
    return httpx.post(receiver.url + "/alerts", json=body, headers=headers, timeout=10)


def test_a_wrong_or_missing_token_is_a_401_and_touches_nothing(receiver: Receiver) -> None:
    firing = payload(alert("firing", "f1", namespace="team-a", infd="chat"))
    for token in (None, "wrong", TOKEN[:-1]):
        response = post(receiver, firing, token=token)
        assert response.status_code == 401, token
        assert response.json()["error"]["code"] == "invalid_token"
        assert response.headers["WWW-Authenticate"] == "Bearer"
    basic = httpx.post(receiver.url + "/alerts", json=firing, auth=("user", TOKEN), timeout=10)
    assert basic.status_code == 401
    assert receiver.evaluated == [] and not receiver.firing("team-a", "chat")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{not json", None),
        (b'{"version": "3", "groupKey": "g", "alerts": []}', "version"),
        (b'{"version": "4", "alerts": []}', "groupKey"),
        (
            b'{"version": "4", "groupKey": "g", "alerts": [{"status": "burning", "labels": {}, "fingerprint": "x"}]}',
            "alerts.0.status",
        ),
        (b"[1, 2]", "body"),
    ],
)
def test_a_payload_that_does_not_parse_is_a_400_naming_the_field(
    receiver: Receiver, raw: bytes, field: str | None
) -> None:
    response = post(receiver, None, raw=raw)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == field
    assert receiver.evaluated == []


def test_firing_evaluates_once_retries_are_deduplicated_and_resolved_never_evaluates(receiver: Receiver) -> None:
    firing = payload(alert("firing", "f1", namespace="team-a", infd="chat"))
    first = post(receiver, firing)
    assert first.json()["evaluated"] == ["team-a/chat"] and first.headers["Server-Timing"].startswith("write;dur=")
    assert receiver.firing("team-a", "chat")
    for _ in range(3):  # Alertmanager's retries and repeat notifications
        answer = post(receiver, firing).json()
        assert answer["evaluated"] == [] and answer["duplicates"] == 1
    assert receiver.evaluated == [("team-a", "chat")]

    resolved = payload(alert("resolved", "f1", namespace="team-a", infd="chat"))
    assert post(receiver, resolved).json() == {"evaluated": [], "resolved": 1, "duplicates": 0, "ignored": 0, "gone": 0}
    assert not receiver.firing("team-a", "chat") and receiver.evaluated == [("team-a", "chat")]

    again = payload(alert("firing", "f1", starts="2026-01-01T01:00:00Z", namespace="team-a", infd="chat"))
    assert post(receiver, again).json()["evaluated"] == ["team-a/chat"], "the same alert firing anew is news"


def test_unknown_objects_and_unlabelled_alerts_are_acknowledged_without_scaling(receiver: Receiver) -> None:
    answer = post(
        receiver,
        payload(alert("firing", "g1", namespace="team-a", infd="deleted"), alert("firing", "g2", severity="warning")),
    ).json()
    assert (answer["gone"], answer["ignored"], answer["evaluated"]) == (1, 1, [])
    assert not receiver.firing("team-a", "deleted")


def test_a_failed_evaluation_is_a_500_and_the_retry_evaluates(receiver: Receiver) -> None:
    receiver.failures_left = 1
    firing = payload(alert("firing", "h1", namespace="team-a", infd="chat"))
    failed = post(receiver, firing)
    assert failed.status_code == 500 and "apiserver unreachable" in failed.json()["error"]["message"]
    assert post(receiver, firing).json()["evaluated"] == ["team-a/chat"]
    assert post(receiver, firing).json()["duplicates"] == 1
    assert (receiver.answered(500), receiver.answered(200)) == (1, 2), "each answer timed, by its status code"


def test_a_real_alertmanager_delivers_with_the_token_and_its_retries_scale_once(
    alertmanager: Service, receiver: Receiver, tmp_path: Path
) -> None:
    """The route documented in docs/autoscaling.md (short group_wait), with the bearer token read from a file
    as a mounted Secret would be; the first delivery fails (a 500) and Alertmanager's retry evaluates."""
    token_file = tmp_path / "am-token"
    token_file.write_text(TOKEN)
    route_alerts_to_shoal(alertmanager, receiver.url + "/alerts", token_file)
    receiver.failures_left = 1
    labels = {"alertname": "ShoalEngineQueueBacklog", "namespace": "team-a", "infd": "chat", "severity": "warning"}
    http_json(alertmanager.url + "/api/v2/alerts", [{"labels": labels, "annotations": {}}])
    eventually(lambda: receiver.evaluated, 60, "Alertmanager's retry after the 500 evaluated the fleet", interval=0.2)
    assert receiver.firing("team-a", "chat")
    http_json(alertmanager.url + "/api/v2/alerts", [{"labels": labels, "annotations": {}}])  # re-sent by Prometheus
    time.sleep(4)  # several group intervals: Alertmanager has re-notified by now if it was going to
    assert receiver.evaluated == [("team-a", "chat")]
