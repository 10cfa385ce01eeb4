"""The gateway's HTTP surface (Starlette on uvicorn): the OpenAI endpoints, health, readiness and metrics."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from shoal.gateway import proxy
from shoal.gateway.gateway import Gateway
from shoal.protocol.errors import APIError, internal_error

log = logging.getLogger(__name__)


def create_app(gateway: Gateway) -> Starlette:
    async def completions(request: Request) -> Response:
        return await _guarded(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await _guarded(request, chat=True)

    async def _guarded(request: Request, chat: bool) -> Response:
        try:
            return await proxy.handle(gateway, request, chat)  # type: ignore[return-value]
        except Exception:
            log.exception("unexpected error in the gateway")
            error = internal_error()
            return JSONResponse(error.body(), status_code=error.status_code)

    async def models(request: Request) -> Response:
        if gateway.api_keys.tenant_for(request.headers.get("authorization")) is None:
            error = APIError(401, "Incorrect or missing API key.", code="invalid_api_key")
            return JSONResponse(error.body(), status_code=401)
        data = [{"id": m, "object": "model", "owned_by": "shoal"} for m in sorted(gateway.fleet.models())]
        return JSONResponse({"object": "list", "data": data})

    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def ready(_: Request) -> Response:
        serving = gateway.fleet.models()
        if not serving:
            return JSONResponse({"ready": False, "models": []}, status_code=503)
        return JSONResponse({"ready": True, "models": sorted(serving)})

    async def metrics(_: Request) -> Response:
        for replica in gateway.fleet.replicas.values():
            gateway.metrics.in_flight.labels(replica.url).set(replica.in_flight)
            gateway.metrics.in_flight_tokens.labels(replica.url).set(replica.load_tokens)
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
