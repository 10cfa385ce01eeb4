"""The path of one generation request through the gateway, and its passthrough back to the client.

Stages, each timed into ``Server-Timing`` and the request's log line: auth (API key -> tenant), validate (JSON,
the shared OpenAI request models, a known model), tokenize (the engine's prompt tokens and block hashes),
quota (per tenant), route (the model's policy over healthy replicas), upstream (connect, send, response
headers) and ttfb (the first body byte). The response to the client starts only once the upstream's first body
byte is in hand: until then a refused connection, a 503 or an upstream that drops the request is retried on
another replica within ``max_attempts`` and ``retry_budget_s``; after it, nothing is retried, and an upstream
that dies mid-stream ends the client's stream with an OpenAI error event. A client that goes away at any point
closes the upstream connection, which makes the engine abort the request and free its KV blocks. Non-streaming
bodies are checked to be JSON, so a backend answering garbage becomes a 502 rather than garbage passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import aiohttp
from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from shoal.gateway.gateway import Gateway
from shoal.gateway.replicas import Fleet, Lease
from shoal.gateway.routing import Decision, RouteRequest
from shoal.gateway.timing import StageTimer
from shoal.protocol.errors import APIError, from_validation_errors, invalid_request, model_not_found, \
    payload_too_large, service_unavailable
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest

access_log = logging.getLogger("shoal.gateway.access")

T = TypeVar("T")

_UPSTREAM_BROKE = (aiohttp.ClientError, asyncio.TimeoutError)


_ID_PREFIX = uuid.uuid4().hex[:12]  # request ids: unique per gateway process, then a counter (no syscall each)
_ids = itertools.count(1)


class ClientGone(Exception):
    """The client disconnected before the response started."""


@dataclass
class RequestState:
    """What the request's log line, metrics and clean-up need, gathered along the way."""

    request_id: str
    endpoint: str
    timer: StageTimer = field(default_factory=StageTimer)
    tenant: str = "-"
    model: str = "-"
    status: int = 0
    outcome: str = "ok"
    prompt_tokens: int | None = None
    backend: str | None = None
    decision: Decision | None = None
    attempts: int = 0
    lease: Lease | None = None
    release_quota: Callable[[], Awaitable[None]] | None = None


def error_response(error: APIError, state: RequestState) -> JSONResponse:
    headers = {**error.headers, "X-Request-Id": state.request_id, "Server-Timing": state.timer.header()}
    return JSONResponse(error.body(), status_code=error.status_code, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing (413) as soon as it exceeds ``limit`` bytes rather than after reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise payload_too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise payload_too_large(limit)
    return bytes(body)


def parse_request(raw: bytes, chat: bool) -> CompletionRequest | ChatCompletionRequest:
    """The body validated against the same request models the engine uses (it is forwarded as it came)."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid_request(f"Malformed JSON body: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    try:
        return (ChatCompletionRequest if chat else CompletionRequest).model_validate(body)
    except ValidationError as exc:
        raise from_validation_errors(exc.errors()) from None


async def _until_disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T:
    """Runs ``work`` but cancels it (raising ``ClientGone``) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnected(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientGone()


def _upstream_headers(request: Request, request_id: str) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    accept = request.headers.get("accept")
    if accept:
        headers["Accept"] = accept
    return headers


@dataclass
class Upstream:
    """An upstream response whose headers and first body chunk have arrived."""

    response: aiohttp.ClientResponse
    first_chunk: bytes


async def forward(gateway: Gateway, state: RequestState, path: str, raw: bytes, headers: dict[str, str],
                  route: RouteRequest) -> Upstream:
    """Sends the request to a replica chosen by the policy, retrying on another until a first byte arrives."""
    assert gateway.session is not None
    config = gateway.config
    timeout = aiohttp.ClientTimeout(total=None, connect=config.connect_timeout_s, sock_read=None)
    deadline = time.monotonic() + config.retry_budget_s
    tried: set[str] = set()
    refused: APIError | None = None
    while state.attempts < config.max_attempts and time.monotonic() < deadline:
        candidates = gateway.fleet.candidates(state.model, tried)
        if not candidates:
            break
        decision = gateway.policy(state.model).decide([r.view() for r in candidates], route)
        replica = gateway.fleet.replicas[decision.replica_id]
        state.timer.mark("route")
        state.attempts += 1
        tried.add(replica.url)
        lease = Fleet.acquire(replica, route.cost_tokens, route.block_hashes)
        response: aiohttp.ClientResponse | None = None
        try:
            response = await gateway.session.post(replica.url + path, data=raw, headers=headers, timeout=timeout)
            state.timer.mark("upstream")
            if response.status == 503:
                retry_after = response.headers.get("Retry-After", "")
                refused = service_unavailable(
                    f"Backend {replica.url} is overloaded or draining.",
                    int(retry_after) if retry_after.isdigit() else config.unavailable_retry_after_s)
                gateway.metrics.retries.labels("unavailable").inc()
                response.close()
                Fleet.release(lease)
                continue
            first = await response.content.readany()
            state.timer.mark("ttfb")
        except _UPSTREAM_BROKE as exc:  # before the first byte: the replica is gone, try another
            if response is not None:
                response.close()
            Fleet.release(lease)
            gateway.eject(replica)
            gateway.metrics.retries.labels("connect" if response is None else "dropped").inc()
            access_log.info(json.dumps({"request_id": state.request_id, "event": "upstream_failed",
                                        "backend": replica.url, "error": str(exc)}))
            continue
        except BaseException:
            if response is not None:
                response.close()
            Fleet.release(lease)
            raise
        state.decision, state.backend, state.lease = decision, replica.url, lease
        gateway.metrics.decisions.labels(state.model, gateway.policy(state.model).name, decision.reason).inc()
        gateway.metrics.matched_blocks.labels(state.model).inc(decision.matched_blocks)
        return Upstream(response, first)
    if refused is not None:
        raise refused
    raise service_unavailable(f"No healthy backend is available for model `{state.model}`.",
                              config.unavailable_retry_after_s)


def _sse_error(message: str) -> bytes:
    body = APIError(502, message, type="server_error", code="upstream_error").body()
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class StreamPassthrough:
    """An ASGI response relaying upstream chunks unbuffered, and closing the upstream if the client leaves."""

    def __init__(self, upstream: Upstream, headers: dict[str, str], finish: Callable[[str], Awaitable[None]]) -> None:
        self.upstream = upstream
        self.headers = headers
        self.finish = finish

    async def _pump(self, send: Send) -> str:
        response = self.upstream.response
        raw_headers = [(k.lower().encode(), v.encode()) for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": response.status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": self.upstream.first_chunk, "more_body": True})
        outcome = "ok"
        try:
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except _UPSTREAM_BROKE:
            outcome = "upstream_broke"
            await send({"type": "http.response.body", "more_body": True,
                        "body": _sse_error("The backend serving this request failed mid-stream.")})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return outcome

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = "client_disconnected"
        pump = asyncio.ensure_future(self._pump(send))
        watcher = asyncio.ensure_future(_until_disconnected(receive))
        try:
            await asyncio.wait((pump, watcher), return_when=asyncio.FIRST_COMPLETED)
            if pump.done() and not pump.cancelled() and pump.exception() is None:
                outcome = pump.result()
        finally:
            for task in (pump, watcher):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            if outcome != "ok":
                self.upstream.response.close()
            else:
                self.upstream.response.release()
            await self.finish(outcome)


async def read_rest(upstream: Upstream) -> bytes:
    chunks = [upstream.first_chunk]
    async for chunk in upstream.response.content.iter_any():
        chunks.append(chunk)
    return b"".join(chunks)


def _looks_like_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return True


async def handle(gateway: Gateway, request: Request, chat: bool) -> Response | StreamPassthrough:
    """``POST /v1/completions`` and ``POST /v1/chat/completions``."""
    endpoint = "/v1/chat/completions" if chat else "/v1/completions"
    state = RequestState(request.headers.get("x-request-id") or f"{_ID_PREFIX}-{next(_ids)}", endpoint)
    try:
        return await _handle(gateway, request, chat, state)
    except APIError as error:
        await _finish(gateway, state, error.status_code, "error")
        return error_response(error, state)
    except (ClientGone, ClientDisconnect):
        await _finish(gateway, state, 499, "client_disconnected")
        return Response(status_code=499)
    except Exception:
        await _finish(gateway, state, 500, "internal_error")  # still give back the replica and the quota
        raise


async def _handle(gateway: Gateway, request: Request, chat: bool, state: RequestState) -> Response | StreamPassthrough:
    config = gateway.config
    tenant = gateway.api_keys.tenant_for(request.headers.get("authorization"))
    if tenant is None:
        raise APIError(401, "Incorrect or missing API key: send it as `Authorization: Bearer <key>`.",
                       type="invalid_request_error", code="invalid_api_key")
    state.tenant = tenant.name
    state.timer.mark("auth")
    raw = await read_body(request, config.max_body_bytes)
    body = parse_request(raw, chat)
    state.model = body.model
    replicas = gateway.fleet.replicas.values()
    every_replica_listed = bool(replicas) and all(r.models for r in replicas)
    if every_replica_listed and state.model not in gateway.fleet.known_models() \
            and state.model not in config.tokenizers:
        raise model_not_found(state.model)  # else a replica yet unheard of may serve it: 503 until it is
    state.timer.mark("validate")
    prompt = gateway.prompts.read(body)
    route = RouteRequest(prompt.block_hashes(config.block_size), prompt.cost_tokens)
    state.prompt_tokens = len(prompt.token_ids) if prompt.token_ids is not None else None
    state.timer.mark("tokenize")
    admission = await gateway.quota.admit(tenant.name, tenant.limits, prompt.cost_tokens)
    if not admission.allowed:
        gateway.metrics.quota_rejections.labels(tenant.name, admission.limit).inc()
        raise APIError(429, f"Tenant `{tenant.name}` is over its {admission.limit} quota; retry later.",
                       type="rate_limit_error", param=admission.limit, code="rate_limit_exceeded",
                       headers={"Retry-After": admission.retry_after_header})
    state.release_quota = lambda: gateway.quota.release(admission)
    state.timer.mark("quota")
    gateway.metrics.overhead.observe(state.timer.elapsed())
    upstream = await unless_disconnected(
        request.receive, forward(gateway, state, state.endpoint, raw, _upstream_headers(request, state.request_id),
                                 route))
    gateway.metrics.ttfb.labels(state.model).observe(state.timer.elapsed())
    response = upstream.response
    headers = {"X-Request-Id": state.request_id, "Server-Timing": state.timer.header(),
               "Content-Type": response.headers.get("Content-Type", "application/json")}
    streaming = "text/event-stream" in headers["Content-Type"]
    if response.status == 200 and body.stream != streaming:
        response.close()
        raise _garbage(state, "a response of the wrong content type")
    if streaming:
        headers["Cache-Control"] = "no-cache"
        state.status = response.status

        async def finish(outcome: str) -> None:
            await _finish(gateway, state, response.status, outcome)

        return StreamPassthrough(upstream, headers, finish)
    try:
        payload = await unless_disconnected(request.receive, read_rest(upstream))
    except _UPSTREAM_BROKE:
        response.close()
        raise _garbage(state, "a truncated response") from None
    except BaseException:
        response.close()
        raise
    response.release()
    if not _looks_like_json(payload):
        raise _garbage(state, "a body that is not JSON")
    await _finish(gateway, state, response.status, "ok")
    return Response(payload, status_code=response.status, headers=headers)


def _garbage(state: RequestState, what: str) -> APIError:
    return APIError(502, f"The backend {state.backend} answered with {what}.", type="server_error",
                    code="bad_gateway")


async def _finish(gateway: Gateway, state: RequestState, status: int, outcome: str) -> None:
    """Once per request: give back the replica and quota, count it, and write its log line."""
    state.status, state.outcome = status, outcome
    if state.lease is not None:
        Fleet.release(state.lease)
        state.lease = None
    if state.release_quota is not None:
        await state.release_quota()
        state.release_quota = None
    metrics = gateway.metrics
    metrics.requests.labels(state.model, state.tenant, str(status)).inc()
    metrics.duration.labels(state.model).observe(state.timer.elapsed())
    if not access_log.isEnabledFor(logging.INFO):
        return
    decision = state.decision
    access_log.info(json.dumps({
        "request_id": state.request_id, "endpoint": state.endpoint, "tenant": state.tenant, "model": state.model,
        "status": status, "outcome": outcome, "backend": state.backend,
        "route_reason": decision.reason if decision else None,
        "matched_blocks": decision.matched_blocks if decision else None, "attempts": state.attempts,
        "prompt_tokens": state.prompt_tokens, "stages_ms": state.timer.as_ms(),
        "duration_ms": round(state.timer.elapsed() * 1000, 3),
    }))

