"""The Alertmanager webhook receiver: ``POST /alerts`` in the operator process.

Alertmanager posts its v4 JSON payload (``version``, ``groupKey``, ``status``, ``alerts[]`` with ``status``,
``labels``, ``startsAt``, ``fingerprint``). An alert whose labels name an InferenceDeployment (``namespace`` and
``infd``, as Shoal's shipped rules carry them) is handed to the autoscaler:

- **firing**: recorded as firing for that fleet, then the fleet is evaluated at once (``evaluate``: the reconciler's
  alert pass), in which the policy may scale up immediately and no scale-down happens; the answer is sent after
  the scale write, so the receipt-to-write time is the request's own latency.
- **resolved**: the boost ends; nothing is evaluated, so a resolved alert never scales down by itself.

Alertmanager retries a notification until it gets a 2xx, and re-sends firing alerts every ``repeat_interval``:
each alert is remembered by ``groupKey`` + ``fingerprint`` with its status and ``startsAt``, and one already
handled is skipped, so a retry never scales twice (a bounded memory: the oldest entries go first). An
evaluation that fails (the apiserver unreachable) answers 500 and is not remembered, so the retry does it.
An alert for an object that no longer exists, or without the two labels, is acknowledged and logged (a retry
could not help). A wrong or missing bearer token is a 401; a payload that does not parse is a 400 naming the
field; neither touches any fleet.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aiohttp import web
from prometheus_client import Histogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shoal.operator.alerts import INFD_LABEL
from shoal.operator.autoscaler import FleetAutoscaler, FleetKey
from shoal.protocol.errors import APIError

log = logging.getLogger(__name__)

NAMESPACE_LABEL = "namespace"
MAX_REMEMBERED = 10_000
# (namespace, name) -> time.perf_counter() once the engine count is written (or found right), None if the object
# does not exist
Evaluate = Callable[[str, str], Awaitable[float | None]]


class Alert(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    fingerprint: str = Field(min_length=1)
    starts_at: str = Field("", alias="startsAt")


class Notification(BaseModel):
    """Alertmanager's webhook payload, version 4 (only the fields the receiver uses are checked)."""

    model_config = ConfigDict(extra="allow")

    version: Literal["4"]
    group_key: str = Field(alias="groupKey")
    alerts: list[Alert]


@dataclass
class Outcome:
    evaluated: list[str]
    resolved: int = 0
    duplicates: int = 0
    ignored: int = 0
    gone: int = 0
    written: float | None = None  # perf_counter() of the last fleet's scale write


def read_token(path: Path) -> Callable[[], str]:
    """The bearer token, read from a mounted Secret key on each request (a rotated Secret applies at once)."""

    def token() -> str:
        return path.read_text().strip()

    return token


class AlertReceiver:
    def __init__(
        self, token: Callable[[], str], autoscaler: FleetAutoscaler, evaluate: Evaluate, latency: Histogram
    ) -> None:
        """``latency``: each request's receipt-to-answer time by status code (the operator's
        ``shoal_operator_alert_webhook_duration_seconds``)."""
        self.token, self.autoscaler, self.evaluate, self.latency = token, autoscaler, evaluate, latency
        self._handled: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_post("/alerts", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        """Answers after the scale writes; ``Server-Timing: write`` is receipt-to-write of the last fleet (ms)."""
        received = time.perf_counter()
        response = await self._answer(request, received)
        self.latency.labels(str(response.status)).observe(time.perf_counter() - received)
        return response

    async def _answer(self, request: web.Request, received: float) -> web.Response:
        try:
            self._authorize(request.headers.get("Authorization", ""))
            notification = _parse(await request.read())
            outcome = await self.receive(notification)
        except APIError as error:
            return web.json_response(error.body(), status=error.status_code, headers=error.headers)
        timing = f"total;dur={(time.perf_counter() - received) * 1000:.1f}"
        if outcome.written is not None:
            timing = f"write;dur={(outcome.written - received) * 1000:.1f}, {timing}"
        body = {k: v for k, v in outcome.__dict__.items() if k != "written"}
        return web.json_response(body, headers={"Server-Timing": timing})

    def _authorize(self, header: str) -> None:
        scheme, _, given = header.partition(" ")
        expected = self.token()
        if scheme.lower() != "bearer" or not expected or not hmac.compare_digest(given.strip(), expected):
            raise APIError(
                401,
                "Missing or wrong bearer token: send `Authorization: Bearer <token>` (the receiver's token Secret).",
                type="authentication_error",
                code="invalid_token",
                headers={"WWW-Authenticate": "Bearer"},
            )

    async def receive(self, notification: Notification) -> Outcome:
        """Applies a parsed notification: firing alerts boost and evaluate their fleets, resolved ones end it."""
        outcome = Outcome(evaluated=[])
        fresh: list[tuple[tuple[str, str], tuple[str, str]]] = []
        fleets: dict[FleetKey, None] = {}
        for alert in notification.alerts:
            seen_key, state = (notification.group_key, alert.fingerprint), (alert.status, alert.starts_at)
            if self._handled.get(seen_key) == state:
                outcome.duplicates += 1
                continue
            fresh.append((seen_key, state))
            namespace, name = alert.labels.get(NAMESPACE_LABEL), alert.labels.get(INFD_LABEL)
            if not namespace or not name:
                log.info(
                    "alert %s has no %s/%s labels naming an InferenceDeployment: ignored",
                    alert.labels.get("alertname", alert.fingerprint),
                    NAMESPACE_LABEL,
                    INFD_LABEL,
                )
                outcome.ignored += 1
                continue
            self.autoscaler.alert((namespace, name), alert.fingerprint, alert.status == "firing")
            if alert.status == "firing":
                fleets[(namespace, name)] = None
            else:
                outcome.resolved += 1
        for namespace, name in fleets:
            try:
                written = await self.evaluate(namespace, name)
            except Exception as error:  # noqa: BLE001 - Alertmanager retries a 5xx: the retry evaluates again
                log.warning("evaluating %s/%s for an alert failed: %s", namespace, name, error)
                raise APIError(
                    500, f"evaluating {namespace}/{name} failed: {error}", type="server_error", code="evaluation_failed"
                ) from None
            if written is not None:
                outcome.evaluated.append(f"{namespace}/{name}")
                outcome.written = written
            else:
                log.info("alert for %s/%s, which no longer exists: acknowledged, nothing scaled", namespace, name)
                self.autoscaler.forget((namespace, name))
                outcome.gone += 1
        for handled_key, handled_state in fresh:
            self._remember(handled_key, handled_state)
        return outcome

    def _remember(self, key: tuple[str, str], state: tuple[str, str]) -> None:
        self._handled[key] = state
        self._handled.move_to_end(key)
        while len(self._handled) > MAX_REMEMBERED:
            self._handled.popitem(last=False)


def _parse(raw: bytes) -> Notification:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise APIError(400, f"The payload is not JSON: {error}", code="invalid_json") from None
    try:
        return Notification.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise APIError(
            400, f"Not an Alertmanager v4 payload: {where}: {first['msg']}", param=where, code="invalid_payload"
        ) from None


async def serve(receiver: AlertReceiver, host: str, port: int) -> web.AppRunner:
    """Starts the receiver's HTTP server; the caller cleans the runner up on shutdown."""
    runner = web.AppRunner(receiver.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
