"""The path of one generation request through the gateway, and its passthrough back to the client.

Stages, each timed into ``Server-Timing`` and the request's log line: auth (API key -> tenant), validate (JSON,
the shared OpenAI request models, a known model), tokenize (the engine's prompt tokens and block hashes),
quota (per tenant), route (the model's policy over healthy replicas), upstream (connect, send, response
headers) and ttfb (the first body byte). The response to the client starts only once the upstream's first body
byte is in hand: until then a refused connection, a 503, an upstream that drops the request or one that sends
no first token in time is retried on another replica within ``max_attempts`` and ``retry_budget_s``; after it,
nothing is retried, and an upstream that dies mid-stream or falls silent past the inter-token limit ends the
client's stream with an OpenAI error event (the time limits: ``shoal.gateway.timeouts``). Non-streaming
bodies are checked to be JSON, so a backend answering garbage becomes a 502 rather than garbage passed on; the
usage the engine reports settles the tenant's quota (``shoal.gateway.usage``). ``_handle`` reads as those stages,
one function each: ``_authenticate``, ``read_body`` and ``validated`` (``shoal.protocol.json_body``, as the engine
reads its bodies), ``_validate``, ``_tokenize``, ``_admit``, ``forward`` (hold, route, attempts under
``shoal.protocol.backoff.Retry``, first byte), then ``_relay`` or ``_respond_whole``; and
``_finish`` gives back the replica, settles the quota and writes the log line, however the request ended.
vLLM's ``/tokenize`` and ``/detokenize`` take a shorter path through the same stages (``serve_tokenization``:
auth, validate, forward, whole response; no prompt hashing and no quota charge: they generate nothing).

This is a bare ASGI handler (no framework objects, one helper task per request) because it is the gateway's hot
path. Once the body is read, a watcher waits for the client's disconnect and cancels the request's task: wherever
the request then is (waiting for quota, for a replica, for the next chunk), it closes its upstream connection,
which makes the engine abort the request and free its KV blocks, and gives back its replica and quota.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from shoal.gateway.auth import Tenant
from shoal.gateway.block_size import hashing_block_size
from shoal.gateway.gateway import Gateway
from shoal.gateway.prompts import Prompt
from shoal.gateway.quota import Admission, Limits, QuotaStore, admission_estimate
from shoal.gateway.replicas import Fleet, Lease, Replica
from shoal.gateway.routing import Decision, RouteRequest
from shoal.gateway.timeouts import REQUEST_TIMEOUT_HEADER, Deadline, TimeoutCode, client_limit
from shoal.gateway.timing import StageTimer
from shoal.gateway.upstream import UpstreamConnectError, UpstreamError, UpstreamResponse, UpstreamTimeout
from shoal.gateway.usage import StreamUsage, total_tokens, with_usage_requested
from shoal.protocol.backoff import Retry
from shoal.protocol.errors import (
    APIError,
    internal_error,
    invalid_api_key,
    invalid_request,
    model_not_found,
    service_unavailable,
)
from shoal.protocol.json_body import (
    ClientDisconnected,
    parse_json_object,
    read_body,
    validated,
    without_unknown_fields,
)
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest
from shoal.protocol.responses_api import ResponsesRequest, response_id
from shoal.protocol.sse import sse_event
from shoal.protocol.tokenize_api import DetokenizeRequest, TokenizeRequest, tokenize_request_model

log = logging.getLogger(__name__)
access_log = logging.getLogger("shoal.gateway.access")

_ID_PREFIX = uuid.uuid4().hex[:12]  # request ids: unique per gateway process, then a counter (no syscall each)
_ids = itertools.count(1)
_WANTED_HEADERS = frozenset((b"authorization", b"x-request-id", b"accept", b"content-length", b"x-request-timeout"))
GenerationRequest = CompletionRequest | ChatCompletionRequest | ResponsesRequest
REQUEST_MODELS: dict[str, type[GenerationRequest]] = {
    "/v1/completions": CompletionRequest,
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/responses": ResponsesRequest,
}


@dataclass
class RequestState:
    """What the request's log line, metrics and clean-up need, gathered along the way."""

    request_id: str
    endpoint: str
    timer: StageTimer = field(default_factory=StageTimer)
    tenant: str = "-"
    model: str = "-"
    user: str | None = None  # the client's end-user id (OpenAI's ``user``), for the log line
    status: int = 0
    outcome: str = "ok"
    prompt_tokens: int | None = None
    backend: str | None = None
    home: str | None = None  # the replica holding the response a Responses request continues, if known
    decision: Decision | None = None
    attempts: int = 0
    lease: Lease | None = None
    release_quota: Callable[[int | None], Awaitable[None]] | None = None
    used_tokens: int | None = None  # as the engine reports it: settles the quota charge
    stream_usage: StreamUsage = field(default_factory=StreamUsage)  # strip: the gateway asked for it, not the client
    upstream: UpstreamResponse | None = None
    deadline: Deadline | None = None
    response_started: bool = False
    client_gone: bool = False
    finished: bool = False


def request_headers(scope: Scope) -> dict[bytes, bytes]:
    """The few request headers the gateway reads (lower-case names, as ASGI gives them)."""
    return {name: value for name, value in scope["headers"] if name in _WANTED_HEADERS}


Handler = Callable[[dict[bytes, bytes], "RequestState", Callable[[], None]], Awaitable[None]]


async def serve(gateway: Gateway, scope: Scope, receive: Receive, send: Send, endpoint: str) -> None:
    """``POST`` to a generation endpoint (a key of ``REQUEST_MODELS``), as an ASGI app."""

    def handle(headers: dict[bytes, bytes], state: RequestState, watch: Callable[[], None]) -> Awaitable[None]:
        return _handle(gateway, headers, receive, send, state, watch)

    await _serve(gateway, scope, receive, send, endpoint, handle)


async def serve_tokenization(gateway: Gateway, scope: Scope, receive: Receive, send: Send, path: str) -> None:
    """``POST /tokenize`` and ``POST /detokenize``, passed to a replica serving the model, as an ASGI app."""

    def handle(headers: dict[bytes, bytes], state: RequestState, watch: Callable[[], None]) -> Awaitable[None]:
        return _handle_tokenization(gateway, headers, receive, send, state, watch)

    await _serve(gateway, scope, receive, send, path, handle)


async def _serve(gateway: Gateway, scope: Scope, receive: Receive, send: Send, endpoint: str, handle: Handler) -> None:
    """Runs ``handle`` and answers whatever way it ends: an error, a client gone, a shutdown, a bug."""
    headers = request_headers(scope)
    given_id = headers.get(b"x-request-id")
    state = RequestState(given_id.decode("latin-1") if given_id else f"{_ID_PREFIX}-{next(_ids)}", endpoint)
    task = asyncio.current_task()
    assert task is not None
    watcher: asyncio.Task[None] | None = None

    def watch() -> None:
        nonlocal watcher
        watcher = asyncio.create_task(_watch_disconnect(receive, state, task))

    try:
        await handle(headers, state, watch)
    except APIError as error:
        await _finish(gateway, state, error.status_code, "error")
        await _send_error(send, error, state)
    except ClientDisconnected:
        await _finish(gateway, state, 499, "client_disconnected")
    except asyncio.CancelledError:
        if not state.client_gone:  # the server is shutting down: give everything back, then stop
            await _finish(gateway, state, 503, "cancelled")
            raise
        task.uncancel()
        await _finish(gateway, state, 499, "client_disconnected")
    except Exception:
        log.exception("unexpected error in the gateway")
        await _finish(gateway, state, 500, "internal_error")
        if not state.response_started:
            await _send_error(send, internal_error(), state)
    finally:
        if watcher is not None:
            watcher.cancel()


async def _watch_disconnect(receive: Receive, state: RequestState, task: asyncio.Task[None]) -> None:
    """After the body, the only message left is the disconnect (also sent once the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if not state.finished:  # from _finish on, the request has nothing left to cancel
        state.client_gone = True
        task.cancel()


async def _handle(
    gateway: Gateway,
    headers: dict[bytes, bytes],
    receive: Receive,
    send: Send,
    state: RequestState,
    watch: Callable[[], None],
) -> None:
    """The request's stages in the order it meets them; each refuses with an ``APIError`` that ``serve`` answers."""
    tenant = _authenticate(gateway, headers, state)
    raw = await read_body(receive, headers.get(b"content-length"), gateway.config.max_body_bytes)
    watch()
    raw, data, body = _validate(gateway, raw, state)
    if isinstance(body, ResponsesRequest) and body.previous_response_id is not None:
        state.home = gateway.response_homes.home(body.previous_response_id)
    prompt, route = _tokenize(gateway, body, state)
    await _admit(gateway, tenant, body, prompt, state)
    raw = _with_usage(raw, data, body, state)
    state.timer.mark("quota")
    gateway.metrics.overhead.observe(state.timer.elapsed())
    upstream, first = await forward(gateway, state, raw, _upstream_headers(headers, state), route, body.stream)
    gateway.metrics.ttfb.labels(state.model).observe(state.timer.elapsed())
    response_headers, streaming = _response_headers(state, upstream, body.stream)
    if streaming:
        await _relay(gateway, state, send, response_headers, first)
    else:
        await _respond_whole(gateway, state, send, response_headers, first)


def _authenticate(gateway: Gateway, headers: dict[bytes, bytes], state: RequestState) -> Tenant:
    """The API key's tenant (401 without one), and the request's time limits from its arrival."""
    config = gateway.config
    authorization = headers.get(b"authorization")
    tenant = gateway.api_keys.tenant_for(authorization.decode("latin-1") if authorization else None)
    if tenant is None:
        raise invalid_api_key()
    state.tenant = tenant.name
    try:
        limit_s = client_limit(headers.get(b"x-request-timeout"), config.request_timeout_s)
    except ValueError as exc:
        raise invalid_request(str(exc), param=REQUEST_TIMEOUT_HEADER, code="invalid_request_timeout") from None
    arrived = time.monotonic() - state.timer.elapsed()
    state.deadline = Deadline.starting(arrived, limit_s, config.first_token_timeout_s, config.inter_token_timeout_s)
    state.timer.mark("auth")
    return tenant


# What the gateway itself reads from a generation body in front of another kind of engine: the model, the prompt as
# the engine will tokenize it, what the quota charges and the relay needs, and a Responses follow-up's home.
ROUTING_FIELDS = frozenset(
    {"model", "messages", "prompt", "input", "instructions", "previous_response_id", "stream", "stream_options"}
    | {"max_tokens", "max_completion_tokens", "max_output_tokens", "n", "user", "add_generation_prompt"}
)


def _validate(gateway: Gateway, raw: bytes, state: RequestState) -> tuple[bytes, dict[str, Any], GenerationRequest]:
    """The body to forward, as JSON and as the shared request model, for a model some replica may serve (404 if
    none can)."""
    model = REQUEST_MODELS[state.endpoint]
    if gateway.config.validate_fields:
        raw, data = _known_fields(gateway, raw, model)
        body = validated(model, data)
    else:  # another kind of engine judges the rest of the body, which goes to it as sent
        data = parse_json_object(raw)
        body = validated(model, {key: value for key, value in data.items() if key in ROUTING_FIELDS})
    state.model, state.user = body.model, body.user
    _check_model(gateway, state)
    state.timer.mark("validate")
    return raw, data, body


def _known_fields(gateway: Gateway, raw: bytes, model: type[BaseModel] | None = None) -> tuple[bytes, dict[str, Any]]:
    """The body as JSON; with ``--ignore-unknown-fields``, less the fields ``model`` does not define (``None``: the
    ``/tokenize`` form the body takes), re-encoded so that the engine behind need not ignore them too."""
    data = parse_json_object(raw)
    if not gateway.config.ignore_unknown_fields:
        return raw, data
    known = without_unknown_fields(model or tokenize_request_model(data), data)
    return (raw, data) if known is data else (json.dumps(known).encode(), known)


def _check_model(gateway: Gateway, state: RequestState) -> None:
    """A 404 for a model no replica serves, once every replica has said what it serves."""
    replicas = gateway.fleet.replicas.values()
    every_replica_listed = bool(replicas) and all(r.models for r in replicas)
    if (
        every_replica_listed
        and state.model not in gateway.fleet.known_models()
        and state.model not in gateway.config.tokenizers
    ):
        raise model_not_found(state.model)  # else a replica yet unheard of may serve it: 503 until it is


async def _handle_tokenization(
    gateway: Gateway,
    headers: dict[bytes, bytes],
    receive: Receive,
    send: Send,
    state: RequestState,
    watch: Callable[[], None],
) -> None:
    """Auth, validation (the engine's models), a model (the only one served if the body names none), then the
    request as it came to any replica serving the model, and its whole answer back."""
    _authenticate(gateway, headers, state)
    raw = await read_body(receive, headers.get(b"content-length"), gateway.config.max_body_bytes)
    watch()
    raw, data = _known_fields(gateway, raw, DetokenizeRequest if state.endpoint == "/detokenize" else None)
    model: type[TokenizeRequest | DetokenizeRequest] = (
        tokenize_request_model(data) if state.endpoint == "/tokenize" else DetokenizeRequest
    )
    body = validated(model, data)
    state.model = body.model or _only_model(gateway)
    _check_model(gateway, state)
    state.timer.mark("validate")
    route = RouteRequest((), 0, gateway.config.block_size)
    upstream, first = await forward(gateway, state, raw, _upstream_headers(headers, state), route, False)
    response_headers, _ = _response_headers(state, upstream, False)
    await _respond_whole(gateway, state, send, response_headers, first)


def _only_model(gateway: Gateway) -> str:
    """The model a request that names none is for: the fleet's only one, else a 400 listing them."""
    models = sorted(gateway.fleet.models())
    if len(models) != 1:
        served = ", ".join(models) or "none yet"
        raise invalid_request(
            f"model: required when the gateway does not serve exactly one model (serving: {served})", param="model"
        )
    return models[0]


def _tokenize(gateway: Gateway, body: GenerationRequest, state: RequestState) -> tuple[Prompt, RouteRequest]:
    """The prompt's tokens as the engine will see them, and its block hashes at the replicas' block size (for a
    LoRA adapter, with its base model's tokenizer and the adapter's extra key, as its replicas hash)."""
    candidates = gateway.fleet.candidates(state.model)
    parent = next((r.parents[state.model] for r in candidates if state.model in r.parents), None)
    prompt = gateway.prompts.read(body, parent)
    block_size = hashing_block_size((r.block_size for r in candidates), gateway.config.block_size)
    route = RouteRequest(prompt.block_hashes(block_size), prompt.cost_tokens, block_size, prompt.output_tokens)
    state.prompt_tokens = len(prompt.token_ids) if prompt.token_ids is not None else None
    state.timer.mark("tokenize")
    return prompt, route


async def _admit(
    gateway: Gateway,
    tenant: Tenant,
    body: GenerationRequest,
    prompt: Prompt,
    state: RequestState,
) -> None:
    """Charges the tenant's quota, then the model's if it has one (a LoRA adapter's, say), for the request's
    estimate: 429 over either, naming whose quota it is, 503 if the store is down. A request the model's quota
    refuses gives the tenant's charge back (its tokens and concurrency; it still counts as one request)."""
    sequences = 1 if isinstance(body, ResponsesRequest) else body.n
    sequences *= len(body.prompts()) if isinstance(body, CompletionRequest) else 1
    cost = admission_estimate(prompt.cost_tokens, prompt.output_tokens, sequences)
    metrics = gateway.metrics
    admitted = await _charge(
        gateway, gateway.quota, "Tenant", tenant.name, tenant.limits, cost, metrics.quota_rejections
    )
    state.release_quota = lambda used: gateway.quota.release(admitted, used)  # from here on, whatever happens
    model_limits = gateway.api_keys.model_limits.get(state.model)
    if model_limits is None:
        return
    try:
        for_model = await _charge(
            gateway, gateway.model_quota, "Model", state.model, model_limits, cost, metrics.model_quota_rejections
        )
    except APIError:
        state.release_quota = None
        await gateway.quota.release(admitted, 0)
        raise

    async def release(used: int | None) -> None:
        await gateway.quota.release(admitted, used)
        await gateway.model_quota.release(for_model, used)

    state.release_quota = release


async def _charge(
    gateway: Gateway, store: QuotaStore, whose: str, name: str, limits: Limits, cost: int, rejections: Counter
) -> Admission:
    """One quota's admission of ``cost`` tokens, or the 429 (503) that refuses it, counted in ``rejections``."""
    admission = await store.admit(name, limits, cost)
    if admission.unmetered:
        gateway.metrics.quota_store_errors.labels("admitted" if admission.allowed else "refused").inc()
    if admission.limit == "quota_store_unavailable":
        raise service_unavailable(
            "The quota store is unreachable; retry later.", gateway.config.unavailable_retry_after_s
        )
    if not admission.allowed:
        rejections.labels(name, admission.limit).inc()
        raise APIError(
            429,
            f"{whose} `{name}` is over its {admission.limit} quota; retry later.",
            type="rate_limit_error",
            param=admission.limit,
            code="rate_limit_exceeded",
            headers={"Retry-After": admission.retry_after_header},
        )
    return admission


def _with_usage(raw: bytes, data: dict[str, Any], body: GenerationRequest, state: RequestState) -> bytes:
    """The body to forward: a stream is asked for its usage event, which settles the quota charge (a Responses
    stream's last event always carries it)."""
    with_usage = None if isinstance(body, ResponsesRequest) else with_usage_requested(data)
    if with_usage is None:
        return raw
    state.stream_usage.strip = True  # the client did not ask for it: it is not passed on
    return with_usage


def _upstream_headers(headers: dict[bytes, bytes], state: RequestState) -> dict[str, str]:
    upstream_headers = {"Content-Type": "application/json", "X-Request-Id": state.request_id}
    accept = headers.get(b"accept")
    if accept:
        upstream_headers["Accept"] = accept.decode("latin-1")
    return upstream_headers


async def forward(
    gateway: Gateway, state: RequestState, raw: bytes, headers: dict[str, str], route: RouteRequest, stream: bool
) -> tuple[UpstreamResponse, bytes]:
    """Sends the request to a replica chosen by the policy, retrying on another until a first byte arrives."""
    assert gateway.upstreams is not None and state.deadline is not None
    config, limits = gateway.config, state.deadline
    if not gateway.fleet.candidates(state.model):  # none ready: hold it for scale from zero (or 503)
        await gateway.hold.wait(state.model, lambda: bool(gateway.fleet.candidates(state.model)))
        state.timer.mark("hold")
    retry = Retry(max_attempts=config.max_attempts, deadline=min(time.monotonic() + config.retry_budget_s, limits.end))
    tried: set[str] = set()
    refused: APIError | None = None
    while retry.allows_another():
        candidates = gateway.fleet.candidates(state.model, tried)
        if not candidates:
            break
        candidates = [r for r in candidates if r.url == state.home] or candidates  # where the continued one is
        decision = gateway.policy(state.model).decide([r.view() for r in candidates], route)
        replica = gateway.fleet.replicas[decision.replica_id]
        state.timer.mark("route")
        retry.begin()
        state.attempts = retry.attempts
        tried.add(replica.url)
        state.lease = Fleet.acquire(replica, route, decision.matched_blocks)
        answer = await _attempt(gateway, state, replica, raw, headers, stream)
        if isinstance(answer, tuple):
            state.decision, state.backend = decision, replica.url
            gateway.metrics.decisions.labels(state.model, gateway.policy(state.model).name, decision.reason).inc()
            gateway.metrics.matched_blocks.labels(state.model).inc(decision.matched_blocks)
            return answer
        refused = answer or refused
    if refused is not None:
        raise refused
    if time.monotonic() >= limits.end:
        raise _timed_out(limits, "request_timeout")
    raise service_unavailable(
        f"No healthy backend is available for model `{state.model}`.", config.unavailable_retry_after_s
    )


async def _attempt(
    gateway: Gateway, state: RequestState, replica: Replica, raw: bytes, headers: dict[str, str], stream: bool
) -> tuple[UpstreamResponse, bytes] | APIError | None:
    """One replica, up to the first body byte: the response and that byte; else what to answer if no other replica
    does (the replica refused or was too slow), or None if it is gone (ejected). A failed attempt is closed."""
    assert gateway.upstreams is not None and state.deadline is not None and state.lease is not None
    limits = state.deadline
    response: UpstreamResponse | None = None
    wait = limits.first_byte(time.monotonic(), stream)
    first_byte_by = time.monotonic() + wait.seconds
    try:
        state.upstream = response = await gateway.upstreams.post(
            replica.url, state.endpoint, raw, headers, first_byte_by
        )
        state.timer.mark("upstream")
        if response.status == 503:
            retry_after = response.headers.get("retry-after", "")
            gateway.metrics.retries.labels("unavailable").inc()
            _close_attempt(state, response)
            return service_unavailable(
                f"Backend {replica.url} is overloaded or draining.",
                int(retry_after) if retry_after.isdigit() else gateway.config.unavailable_retry_after_s,
            )
        first = await response.read(first_byte_by - time.monotonic())
    except UpstreamTimeout:  # slow, not gone: close it (the engine aborts) and try another, not ejecting it
        _close_attempt(state, response)
        gateway.metrics.timeouts.labels(wait.code).inc()
        access_log.info(
            json.dumps(
                {
                    "request_id": state.request_id,
                    "event": "upstream_timed_out",
                    "backend": replica.url,
                    "limit": wait.code,
                }
            )
        )
        return _timed_out(limits, wait.code)
    except UpstreamError as exc:  # before the first byte: the replica is gone, try another
        _close_attempt(state, response)
        gateway.eject(replica)
        gateway.metrics.retries.labels("connect" if isinstance(exc, UpstreamConnectError) else "dropped").inc()
        access_log.info(
            json.dumps(
                {"request_id": state.request_id, "event": "upstream_failed", "backend": replica.url, "error": str(exc)}
            )
        )
        return None
    state.timer.mark("ttfb")
    Fleet.prefilled(state.lease)
    return response, first


def _response_headers(
    state: RequestState, upstream: UpstreamResponse, stream: bool
) -> tuple[list[tuple[bytes, bytes]], bool]:
    """The client's response headers, and whether it streams (a 200 of the other kind than asked is a 502)."""
    content_type = upstream.headers.get("content-type", "application/json")
    streaming = "text/event-stream" in content_type
    if upstream.status == 200 and stream != streaming:
        raise _bad_response(state, "a response of the wrong content type")
    headers = [
        (b"content-type", content_type.encode("latin-1")),
        (b"x-request-id", state.request_id.encode("latin-1")),
        (b"server-timing", state.timer.header().encode("latin-1")),
    ]
    if streaming:  # no cache, and no buffering in an nginx in front (ingress-nginx included): docs/expose.md
        headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
    return headers, streaming


async def _respond_whole(
    gateway: Gateway, state: RequestState, send: Send, headers: list[tuple[bytes, bytes]], first: bytes
) -> None:
    """A non-streaming answer: read to its end, checked to be JSON, its usage settling the quota, then sent."""
    upstream, deadline = state.upstream, state.deadline
    assert upstream is not None and deadline is not None
    try:
        payload = first + await upstream.read_all(deadline.end)
    except UpstreamTimeout:
        raise _timed_out(deadline, "request_timeout") from None
    except UpstreamError:
        raise _bad_response(state, "a truncated response") from None
    try:
        state.used_tokens = total_tokens(json.loads(payload))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise _bad_response(state, "a body that is not JSON") from None
    upstream.release()
    state.upstream = None
    await _finish(gateway, state, upstream.status, "ok")
    await send(
        {
            "type": "http.response.start",
            "status": upstream.status,
            "headers": [*headers, (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _relay(
    gateway: Gateway, state: RequestState, send: Send, headers: list[tuple[bytes, bytes]], first: bytes
) -> None:
    """Passes the upstream's SSE stream on as it arrives; an upstream dying mid-stream ends it with an error event."""
    upstream, deadline = state.upstream, state.deadline
    assert upstream is not None and deadline is not None
    state.response_started = True
    await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
    outcome = "ok"
    chunk = _read_usage(state, first)
    try:
        while not upstream.at_end:  # the last chunk goes out with the end of the body, in one write
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            wait = deadline.next_chunk(time.monotonic())
            try:
                chunk = _read_usage(state, await upstream.read(wait.seconds))
            except UpstreamTimeout:  # the upstream is closed by _finish: the engine aborts the request
                gateway.metrics.timeouts.labels(wait.code).inc()
                outcome, chunk = wait.code, _sse(_timed_out(deadline, wait.code))
                break
    except UpstreamError:
        outcome = "upstream_broke"
        chunk = _sse(
            APIError(
                502, "The backend serving this request failed mid-stream.", type="server_error", code="upstream_error"
            )
        )
    if outcome == "ok":
        upstream.release()
        state.upstream = None  # back in the pool; _finish closes a broken one
    await _finish(gateway, state, upstream.status, outcome)
    await send({"type": "http.response.body", "body": chunk, "more_body": False})


def _read_usage(state: RequestState, chunk: bytes) -> bytes:
    """Notes the usage a stream's chunk reports (settling the quota), without the event if the gateway asked."""
    chunk, used = state.stream_usage.take(chunk)
    if used is not None:
        state.used_tokens = used
    return chunk


def _close_attempt(state: RequestState, response: UpstreamResponse | None) -> None:
    """Abandons one attempt before its first byte: its connection and its claim on the replica."""
    if response is not None:
        response.close()
    state.upstream = None
    _give_back(state)


def _give_back(state: RequestState) -> None:
    if state.lease is not None:
        Fleet.release(state.lease)
        state.lease = None


def _sse(error: APIError) -> bytes:
    """An error as the last event of a stream already started (its status can no longer change)."""
    return sse_event(error.body()).encode()


def _timed_out(deadline: Deadline, code: TimeoutCode) -> APIError:
    """504, naming the limit that ran out (``code``), for a client to retry or to raise its limit."""
    return APIError(504, deadline.message(code), type="timeout_error", code=code)


def _bad_response(state: RequestState, what: str) -> APIError:
    """502: the backend answered, but not with something that can be passed on."""
    return APIError(502, f"The backend {state.backend} answered with {what}.", type="server_error", code="bad_gateway")


async def _send_error(send: Send, error: APIError, state: RequestState) -> None:
    payload = json.dumps(error.body()).encode()
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
    headers += [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"x-request-id", state.request_id.encode("latin-1")),
        (b"server-timing", state.timer.header().encode("latin-1")),
    ]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _finish(gateway: Gateway, state: RequestState, status: int, outcome: str) -> None:
    """Once per request: give back the replica and quota, count it, and write its log line."""
    if state.finished:
        return
    state.finished = True
    if state.upstream is not None:
        state.upstream.close()
        state.upstream = None
    state.status, state.outcome = status, outcome
    if status == 200 and state.endpoint == "/v1/responses" and state.backend is not None:
        gateway.response_homes.record(response_id(state.request_id), state.backend)
    _give_back(state)
    if state.release_quota is not None:
        release, state.release_quota = state.release_quota, None
        await release(state.used_tokens)
    metrics = gateway.metrics
    metrics.requests.labels(state.model, state.tenant, str(status)).inc()
    metrics.duration.labels(state.model).observe(state.timer.elapsed())
    if not access_log.isEnabledFor(logging.INFO):
        return
    decision = state.decision
    access_log.info(
        json.dumps(
            {
                "request_id": state.request_id,
                "endpoint": state.endpoint,
                "tenant": state.tenant,
                "model": state.model,
                "user": state.user,
                "status": status,
                "outcome": outcome,
                "backend": state.backend,
                "route_reason": decision.reason if decision else None,
                "matched_blocks": decision.matched_blocks if decision else None,
                "attempts": state.attempts,
                "prompt_tokens": state.prompt_tokens,
                "stages_ms": state.timer.as_ms(),
                "duration_ms": round(state.timer.elapsed() * 1000, 3),
            }
        )
    )
