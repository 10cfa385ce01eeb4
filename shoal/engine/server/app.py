"""The engine's HTTP API: OpenAI-compatible endpoints plus health, readiness, metrics and KV events.

Handlers read the body themselves (``shoal.protocol.json_body``, as the gateway does: capped, parsed, validated
against the shared request models), so that every bad input becomes an OpenAI-style 4xx naming the problem;
FastAPI's 422 and its HTML 404/405 are rewritten to the same shape, and an unexpected exception becomes a bare
500 whose details go to the log only. ``build_app`` reads as the app's parts in request order: the engine's lifespan, the error
handlers, the generation path (``_generate``: read, validate, check the model, tokenize, admit, respond), the
model list, vLLM's ``/tokenize``, ``/detokenize`` and ``/version``, the probes and the KV event stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, PlainTextResponse, Response

from shoal import __version__
from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.lora import LoRAAdapter, LoRAError
from shoal.engine.server import chat, completions, responses, tokenization
from shoal.engine.server.async_engine import AsyncEngine
from shoal.engine.server.request_context import RequestIdMiddleware, current_request_id
from shoal.engine.server.request_params import OpenAIRequest, engine_error
from shoal.engine.server.response_store import ResponseStore
from shoal.engine.server.serving import ClosingStreamingResponse, Endpoint, respond
from shoal.engine.tool_parsers import ToolParserSettings
from shoal.fetch import FetchError, local_path
from shoal.protocol.errors import (
    APIError,
    from_http_status,
    from_validation_errors,
    internal_error,
    model_not_found,
)
from shoal.protocol.json_body import ClientDisconnected, parse_json_object, read_body, validated
from shoal.protocol.lora_api import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList
from shoal.protocol.openapi import openapi_document
from shoal.protocol.responses_api import ResponsesRequest
from shoal.protocol.sse import sse_event
from shoal.protocol.tokenize_api import DetokenizeRequest, VersionResponse, tokenize_request_model

log = logging.getLogger(__name__)
DRAIN_FACTOR = 64  # an oversized body is read and dropped up to this many times the limit, so its sender sees the 413


@dataclass(frozen=True)
class ServerSettings:
    served_model_names: tuple[str, ...]
    max_body_bytes: int = 1024 * 1024
    ignore_unknown_fields: bool = False
    tools: ToolParserSettings = field(default_factory=ToolParserSettings)  # --tool-call-parser and its flag
    allow_runtime_lora_updating: bool = False
    download_dir: Path | None = None  # where hf:// and s3:// adapters are fetched (None: the default cache)


def _error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers)


def build_app(engine: AsyncEngine, settings: ServerSettings) -> FastAPI:
    """The FastAPI application around a (not yet started) ``AsyncEngine``, assembled in request order."""
    # FastAPI's own document would describe every body as untyped (the handlers parse it): serve the shared one
    app = FastAPI(title="shoal engine", lifespan=_lifespan(engine), docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(RequestIdMiddleware)
    _add_error_handlers(app)
    _add_generation_routes(app, engine, settings, ResponseStore())
    _add_model_routes(app, engine, settings)
    if settings.allow_runtime_lora_updating:
        _add_lora_routes(app, engine, settings)
    _add_tokenization_routes(app, engine, settings)
    _add_probes(app, engine)
    _add_kv_events(app, engine)
    return app


def _lifespan(engine: AsyncEngine) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The engine's step thread runs while the app does; the model loads on it after the port opens."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            engine.stop()

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Every failure leaves as an OpenAI error body: ours, FastAPI's 422, Starlette's 404/405, and a bare 500;
    a client that left mid-body gets nothing (it cannot read it) and is logged as gone."""

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(ClientDisconnected)
    async def client_left(_: Request, exc: ClientDisconnected) -> Response:
        """Nobody is left to read an answer: a departure, not an error with a traceback in the log."""
        log.info("the client left before its body was complete")
        return Response(status_code=499)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(from_validation_errors(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error_response(from_http_status(exc.status_code, str(exc.detail), exc.headers))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error in request %s", current_request_id(), exc_info=exc)
        return _error_response(internal_error())


async def _json_body(request: Request, settings: ServerSettings) -> dict[str, Any]:
    limit = settings.max_body_bytes
    raw = await read_body(
        request.receive, request.headers.get("content-length"), limit, drain_limit=DRAIN_FACTOR * limit
    )
    return parse_json_object(raw)


async def _generate(
    request: Request,
    engine: AsyncEngine,
    settings: ServerSettings,
    model: type[OpenAIRequest],
    endpoint: Endpoint,
) -> Response:
    """The path every generation endpoint shares: read, validate, check the model, tokenize, compile the
    structured-output grammar if any, admit, respond."""
    req = validated(model, await _json_body(request, settings), settings.ignore_unknown_fields)
    lora_name = _adapter_named(req.model, engine, settings)
    core = engine.loaded_core()
    prepared = await endpoint.prepare(req, current_request_id(), core.tokenizer, core.max_model_len)
    grammar = prepared.children[0].params.structured_output if prepared.children else None
    if grammar is not None:  # compiled here, off the step thread: the engine then finds it in its cache
        try:
            await asyncio.to_thread(core.grammars.compile, grammar)
        except InvalidRequestError as exc:
            raise engine_error(exc) from None
    children = [replace(child, lora_name=lora_name) for child in prepared.children] if lora_name else prepared.children
    generation = await engine.submit(prepared.request_id, children)
    return await respond(request, generation, prepared, endpoint.Formatter(core.tokenizer, prepared), req.stream)


def _adapter_named(model: str, engine: AsyncEngine, settings: ServerSettings) -> str | None:
    """``None`` for the base model's names, the adapter's name for a loaded LoRA adapter; else 404."""
    if model in settings.served_model_names:
        return None
    lora = engine.loaded_core().lora
    if lora is None or model not in lora.adapters:
        raise model_not_found(model)
    return model


def _add_generation_routes(app: FastAPI, engine: AsyncEngine, settings: ServerSettings, store: ResponseStore) -> None:
    chat_endpoint = chat.Endpoint(settings.tools)
    responses_endpoint = responses.Endpoint(store, settings.tools)

    @app.post("/v1/completions")
    async def create_completion(request: Request) -> Response:
        return await _generate(request, engine, settings, CompletionRequest, completions)

    @app.post("/v1/chat/completions")
    async def create_chat_completion(request: Request) -> Response:
        return await _generate(request, engine, settings, ChatCompletionRequest, chat_endpoint)

    @app.post("/v1/responses")
    async def create_response(request: Request) -> Response:
        return await _generate(request, engine, settings, ResponsesRequest, responses_endpoint)


def _model_list(engine: AsyncEngine, settings: ServerSettings) -> ModelList:
    """The served names; once loaded, with the scheduler's limits, from which a gateway reads the capacity."""
    core = engine.core
    if core is None:
        return ModelList(data=[ModelCard(id=name) for name in settings.served_model_names])
    config = core.config
    base = [
        ModelCard(
            id=name,
            max_model_len=core.max_model_len,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_num_seqs=config.max_num_seqs,
            block_size=config.block_size,
        )
        for name in settings.served_model_names
    ]
    adapters = list(core.lora.adapters.values()) if core.lora is not None else []
    parent = settings.served_model_names[0]
    return ModelList(
        data=base
        + [ModelCard(id=a.name, root=a.path, parent=parent, max_model_len=core.max_model_len) for a in adapters]
    )


def _add_model_routes(app: FastAPI, engine: AsyncEngine, settings: ServerSettings) -> None:
    @app.get("/v1/models")
    async def list_models() -> JSONResponse:
        return JSONResponse(_model_list(engine, settings).model_dump())

    @app.get("/openapi.json")
    async def openapi() -> JSONResponse:
        return JSONResponse(openapi_document("shoal engine"))


def _add_lora_routes(app: FastAPI, engine: AsyncEngine, settings: ServerSettings) -> None:
    """vLLM's run-time adapter loading (``--allow-runtime-lora-updating``): the files are read and checked off the
    step thread, then the adapter is added (or removed) between two steps."""

    def lora_error(exc: LoRAError) -> APIError:
        return APIError(exc.status, str(exc), param=exc.field, code="lora_adapter_error")

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Response:
        req = validated(LoadLoRAAdapterRequest, await _json_body(request, settings), settings.ignore_unknown_fields)
        core = engine.loaded_core()

        def fetch_and_read() -> LoRAAdapter:
            try:
                path = local_path(req.lora_path, settings.download_dir, report=log.info)
            except FetchError as exc:
                raise LoRAError("lora_path", f"adapter {req.lora_name!r}: {exc}") from None
            return core.read_lora(req.lora_name, path, settings.served_model_names)

        try:
            adapter = await asyncio.to_thread(fetch_and_read)
            await engine.on_step_thread(lambda c: c.add_lora(adapter))
        except LoRAError as exc:
            raise lora_error(exc) from None
        log.info("LoRA adapter %s loaded from %s", req.lora_name, req.lora_path)
        return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> Response:
        req = validated(UnloadLoRAAdapterRequest, await _json_body(request, settings), settings.ignore_unknown_fields)
        try:
            await engine.on_step_thread(lambda c: c.remove_lora(req.lora_name))
        except LoRAError as exc:
            raise lora_error(exc) from None
        log.info("LoRA adapter %s unloaded", req.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")


def _add_tokenization_routes(app: FastAPI, engine: AsyncEngine, settings: ServerSettings) -> None:
    """vLLM's utility routes; ``model`` may be left out (the served model), a name not served is a 404."""

    def check_model(model: str | None) -> None:
        if model is not None:
            _adapter_named(model, engine, settings)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> JSONResponse:
        data = await _json_body(request, settings)
        req = validated(tokenize_request_model(data), data, settings.ignore_unknown_fields)
        check_model(req.model)
        core = engine.loaded_core()
        return JSONResponse((await tokenization.tokenize(req, core.tokenizer, core.max_model_len)).model_dump())

    @app.post("/detokenize")
    async def detokenize(request: Request) -> JSONResponse:
        req = validated(DetokenizeRequest, await _json_body(request, settings), settings.ignore_unknown_fields)
        check_model(req.model)
        return JSONResponse((await tokenization.detokenize(req, engine.loaded_core().tokenizer)).model_dump())

    @app.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse(VersionResponse(version=__version__).model_dump())


def _add_probes(app: FastAPI, engine: AsyncEngine) -> None:
    @app.get("/health")
    async def health() -> JSONResponse:
        """Alive, loading included; 503 once the engine is dead (the pod should be restarted)."""
        if engine.dead:
            return JSONResponse({"status": "dead"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready() -> JSONResponse:
        """Accepting requests: loaded, running, not draining."""
        if engine.ready:
            return JSONResponse({"status": "ready"})
        status = "dead" if engine.dead else "draining" if engine.draining else "loading"
        return JSONResponse({"status": status}, status_code=503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _add_kv_events(app: FastAPI, engine: AsyncEngine) -> None:
    @app.get("/kv/events")
    async def kv_events() -> Response:
        """A snapshot of the cached block hashes, then every change, as SSE until the client leaves."""
        follower = await engine.follow_kv_events()

        async def body() -> AsyncIterator[str]:
            async for event in follower.events():
                yield sse_event(event)

        def close() -> None:
            engine.kv_hub.detach(follower)
            follower.close()

        return ClosingStreamingResponse(
            body(), on_close=close, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
