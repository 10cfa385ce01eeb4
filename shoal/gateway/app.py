"""The gateway's HTTP surface on uvicorn: the OpenAI endpoints, vLLM's tokenizer routes, health, readiness and
metrics.

The generation endpoints are the hot path: ``POST`` to them goes straight to ``proxy.serve``, past
Starlette's middleware and router (``/tokenize`` and ``/detokenize`` likewise, to ``proxy.serve_tokenization``);
every other request (including a wrong method on those paths, answered 405) goes through Starlette.
``/version`` is the gateway's own: it is the same package as the engines it fronts.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from shoal import __version__
from shoal.gateway import proxy
from shoal.gateway.dashboard import dashboard_routes
from shoal.gateway.gateway import Gateway
from shoal.protocol.errors import from_http_status, invalid_api_key
from shoal.protocol.openai_api import ModelCard, ModelList
from shoal.protocol.openapi import openapi_document
from shoal.protocol.tokenize_api import VersionResponse


class _Generation:
    """A generation endpoint (``/v1/completions``, ``/v1/chat/completions``, ``/v1/responses``) as an ASGI endpoint."""

    def __init__(self, gateway: Gateway, path: str) -> None:
        self.gateway = gateway
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await proxy.serve(self.gateway, scope, receive, send, self.path)


class _Tokenization:
    """``/tokenize`` or ``/detokenize`` as an ASGI endpoint."""

    def __init__(self, gateway: Gateway, path: str) -> None:
        self.gateway = gateway
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await proxy.serve_tokenization(self.gateway, scope, receive, send, self.path)


def create_app(gateway: Gateway, dashboard_data: Path | None = None) -> ASGIApp:
    """``dashboard_data``: the fleet figures file ``/dashboard`` charts (``shoal up`` writes it); no page without."""
    generation: dict[str, ASGIApp] = {
        **{path: _Generation(gateway, path) for path in proxy.REQUEST_MODELS},
        "/tokenize": _Tokenization(gateway, "/tokenize"),
        "/detokenize": _Tokenization(gateway, "/detokenize"),
    }

    async def models(request: Request) -> Response:
        """The engine's model list type; the scheduler limits are per replica, so the fleet's cards leave them out."""
        if gateway.api_keys.tenant_for(request.headers.get("authorization")) is None:
            error = invalid_api_key()
            return JSONResponse(error.body(), status_code=error.status_code)
        cards = [ModelCard(id=model) for model in sorted(gateway.fleet.models())]
        return JSONResponse(ModelList(data=cards).model_dump(exclude_none=True))

    async def openapi(_: Request) -> Response:
        """Public, like OpenAI's own spec: it holds no key and nothing of this fleet, and says when a key is needed."""
        return JSONResponse(openapi_document("shoal gateway", bearer_auth=gateway.api_keys.enabled))

    async def version(_: Request) -> Response:
        return JSONResponse(VersionResponse(version=__version__).model_dump())

    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def ready(_: Request) -> Response:
        """Ready once some replica serves and the configured tokenizers are loaded (else routing is blind)."""
        serving, loading = sorted(gateway.fleet.models()), gateway.prompts.loading()
        ready = bool(serving) and not loading
        return JSONResponse(
            {"ready": ready, "models": serving, "tokenizers_loading": loading}, status_code=200 if ready else 503
        )

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
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in generation.items()),
        Route("/v1/models", models, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *(dashboard_routes(dashboard_data) if dashboard_data is not None else []),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        error = from_http_status(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", exc.headers)
        return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers)

    starlette = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = generation.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await starlette(scope, receive, send)

    return app
